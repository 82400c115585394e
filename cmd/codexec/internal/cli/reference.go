package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The configuration reference (docs/configuration.md) is generated from the
// commands' own -h output, so that the flags, their environment variables
// and their defaults are written down in one place only: the code. The part
// of the page between referenceBegin and referenceEnd is the generated one;
// reference_test.go checks that it matches a fresh rendering and rewrites it
// with -update.

// referenceCommands are the subcommands whose flags the reference lists, in
// the order it lists them.
var referenceCommands = []string{"dev", "frontend", "worker", "export", "status", "bench", "batch"}

const (
	referenceBegin = "<!-- BEGIN GENERATED: flags of every command; regenerate with `go test ./cmd/codexec/internal/cli -run TestConfigurationReference -update` -->"
	referenceEnd   = "<!-- END GENERATED -->"

	// dataDirDefault stands for defaultDataDir(), which depends on the
	// machine and the user that render the reference.
	dataDirDefault = "$XDG_DATA_HOME/codexec (else ~/.local/share/codexec)"
)

// flagDoc is one flag as its command's -h output describes it.
type flagDoc struct {
	Name    string // without dashes
	Type    string // as the flag package prints it: string, int, duration, value; empty for a bool
	Help    string // the help text without the variable and the default
	Env     string // the environment variable, without the '$'; empty when there is none
	Default string // empty when -h shows none (the type's zero value)
	Shown   bool   // whether -h showed a default
}

// configurationReference renders the flags of every command in
// referenceCommands as markdown, one section per command, from what
// "codexec <command> -h" prints. Defaults read from the environment, so it
// refuses to render while a CODEXEC_ variable is set: the reference must
// show the built-in defaults, not one machine's settings.
func configurationReference(ctx context.Context) (string, error) {
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "CODEXEC_") && v != "" {
			return "", fmt.Errorf("$%s is set: the reference would show it as a default; unset it", k)
		}
	}
	var b strings.Builder
	var usage bytes.Buffer
	if rc := Main(ctx, []string{"help"}, strings.NewReader(""), &usage, &usage); rc != 0 {
		return "", fmt.Errorf("codexec help exited %d: %s", rc, usage.String())
	}
	b.WriteString("```\n")
	b.WriteString(strings.TrimRight(usage.String(), "\n"))
	b.WriteString("\n```\n")
	for _, cmd := range referenceCommands {
		docs, err := commandFlags(ctx, cmd)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "\n### `codexec %s`\n\n", cmd)
		b.WriteString("| flag | environment variable | default | meaning |\n|---|---|---|---|\n")
		for _, d := range docs {
			env := ""
			if d.Env != "" {
				env = "`" + d.Env + "`"
			}
			fmt.Fprintf(&b, "| `--%s` | %s | %s | %s |\n", d.Name, env, cell(d.defaultText()), escapeCell(d.Help))
		}
	}
	return b.String(), nil
}

// commandFlags runs "codexec <cmd> -h" through Main and parses its output.
func commandFlags(ctx context.Context, cmd string) ([]flagDoc, error) {
	var out bytes.Buffer
	if rc := Main(ctx, []string{cmd, "-h"}, strings.NewReader(""), &out, &out); rc != 0 {
		return nil, fmt.Errorf("codexec %s -h exited %d: %s", cmd, rc, out.String())
	}
	text := strings.ReplaceAll(out.String(), defaultDataDir(), dataDirDefault)
	docs, err := parseFlagHelp(text)
	if err != nil {
		return nil, fmt.Errorf("codexec %s -h: %w", cmd, err)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("codexec %s -h listed no flags:\n%s", cmd, out.String())
	}
	return docs, nil
}

var (
	// withEnvRe splits a help text "HELP ($VAR)" or "HELP ($VAR) (default X)",
	// withoutEnvRe one "HELP (default X)" of a flag without a variable.
	withEnvRe    = regexp.MustCompile(`^(.*) \(\$([A-Z0-9_]+)\)( \(default (.*)\))?$`)
	withoutEnvRe = regexp.MustCompile(`^(.*)()( \(default (.*)\))$`)
)

// parseFlagHelp reads the output of flag.FlagSet.PrintDefaults: a line
// "  -name type" (no type for a bool) per flag, then its help on lines
// indented by four spaces and a tab. The flags of package flagenv end the
// help with " ($VAR)", and the flag package, or the helper for flags of its
// own type, adds " (default X)" after it.
func parseFlagHelp(text string) ([]flagDoc, error) {
	var docs []flagDoc
	var help []string
	flush := func() error {
		if len(docs) == 0 {
			return nil
		}
		d := &docs[len(docs)-1]
		h := strings.Join(help, " ")
		help = help[:0]
		m := withEnvRe.FindStringSubmatch(h)
		if m == nil {
			m = withoutEnvRe.FindStringSubmatch(h)
		}
		if m != nil {
			h, d.Env = m[1], m[2]
			if m[3] != "" {
				def := m[4]
				if u, err := strconv.Unquote(def); err == nil {
					def = u
				}
				d.Default, d.Shown = def, true
			}
		}
		if h == "" {
			return fmt.Errorf("flag -%s has no help", d.Name)
		}
		d.Help = h
		return nil
	}
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "    \t"):
			if len(docs) == 0 {
				return nil, fmt.Errorf("help text before any flag: %q", line)
			}
			help = append(help, strings.TrimSpace(line))
		case strings.HasPrefix(line, "  -"):
			if err := flush(); err != nil {
				return nil, err
			}
			name, typ, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			docs = append(docs, flagDoc{Name: name, Type: strings.TrimSpace(typ)})
		case strings.HasPrefix(line, "Usage of "), strings.TrimSpace(line) == "":
		default:
			return nil, fmt.Errorf("unexpected line %q", line)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

// defaultText is the default as the reference shows it: the one -h showed,
// or the zero value that -h leaves out.
func (d flagDoc) defaultText() string {
	if d.Shown {
		return d.Default
	}
	switch d.Type {
	case "":
		return "false"
	case "int":
		return "0"
	case "duration":
		return "0s"
	}
	return ""
}

// cell renders a default as code, or "empty" for the empty string.
func cell(def string) string {
	if def == "" {
		return "empty"
	}
	if def == dataDirDefault {
		return "`$XDG_DATA_HOME/codexec`, else `~/.local/share/codexec`"
	}
	return "`" + def + "`"
}

// escapeCell keeps text from ending a markdown table cell.
func escapeCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// spliceReference returns doc with the text between its generated markers
// replaced by gen.
func spliceReference(doc, gen string) (string, error) {
	start, end, err := referenceBounds(doc)
	if err != nil {
		return "", err
	}
	return doc[:start] + "\n" + gen + doc[end:], nil
}

// generatedPart returns the text between doc's generated markers, as
// spliceReference writes it.
func generatedPart(doc string) (string, error) {
	start, end, err := referenceBounds(doc)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(doc[start:end], "\n"), nil
}

// referenceBounds returns the offsets just after the begin marker and at the
// start of the end marker.
func referenceBounds(doc string) (int, int, error) {
	i := strings.Index(doc, referenceBegin)
	if i < 0 || strings.Count(doc, referenceBegin) != 1 {
		return 0, 0, fmt.Errorf("want exactly one line %q", referenceBegin)
	}
	start := i + len(referenceBegin)
	j := strings.Index(doc[start:], referenceEnd)
	if j < 0 || strings.Count(doc, referenceEnd) != 1 {
		return 0, 0, fmt.Errorf("want exactly one line %q after the begin marker", referenceEnd)
	}
	return start, start + j, nil
}
