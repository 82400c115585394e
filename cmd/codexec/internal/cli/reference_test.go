package cli

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/configuration.md")

// configurationDoc is docs/configuration.md, from this package's directory.
var configurationDoc = filepath.Join("..", "..", "..", "..", "docs", "configuration.md")

// clearCodexecEnv empties every CODEXEC_ variable for the test, so that the
// flags show their built-in defaults (the helpers treat an empty variable
// as unset).
func clearCodexecEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "CODEXEC_") {
			t.Setenv(k, "")
		}
	}
}

// TestConfigurationReferenceInSync fails when a flag, its variable, its
// default or its help changed without docs/configuration.md; -update
// rewrites the page's generated part.
func TestConfigurationReferenceInSync(t *testing.T) {
	clearCodexecEnv(t)
	gen, err := configurationReference(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(configurationDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	if *update {
		out, err := spliceReference(doc, gen)
		if err != nil {
			t.Fatalf("docs/configuration.md: %v", err)
		}
		if err := os.WriteFile(configurationDoc, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := generatedPart(doc)
	if err != nil {
		t.Fatalf("docs/configuration.md: %v", err)
	}
	if got != gen {
		t.Fatalf("docs/configuration.md does not match the flags (first difference: %s).\n"+
			"Regenerate it with: go test ./cmd/codexec/internal/cli -run TestConfigurationReference -update",
			firstDifference(got, gen))
	}
}

// firstDifference names the first line where the page (got) and a fresh
// rendering (want) differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return "generated line " + strconv.Itoa(i+1) + ": the page has " + quoteLine(gl, i < len(g)) + ", the flags give " + quoteLine(wl, i < len(w))
		}
	}
	return "none"
}

func quoteLine(s string, ok bool) string {
	if !ok {
		return "nothing"
	}
	return "\"" + s + "\""
}

// TestConfigurationReferenceContents checks the rendering itself: every
// command has a section, every flag of a server command names its
// environment variable, and the defaults are the built-in ones.
func TestConfigurationReferenceContents(t *testing.T) {
	clearCodexecEnv(t)
	gen, err := configurationReference(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range referenceCommands {
		if !strings.Contains(gen, "\n### `codexec "+cmd+"`\n") {
			t.Errorf("no section for %s", cmd)
		}
		docs, err := commandFlags(context.Background(), cmd)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			if cmd != "bench" && cmd != "batch" && d.Env == "" { // the clients read what they must from flags
				t.Errorf("%s --%s: no environment variable parsed from its help %q", cmd, d.Name, d.Help)
			}
			if strings.Contains(d.Help, "($") {
				t.Errorf("%s --%s: help %q still holds the variable", cmd, d.Name, d.Help)
			}
		}
	}
	for _, row := range []string{
		"| `--data-dir` | `CODEXEC_DATA_DIR` | `$XDG_DATA_HOME/codexec`, else `~/.local/share/codexec` |",
		"| `--nats` | `CODEXEC_NATS_URL` | `nats://127.0.0.1:4222` |",
		"| `--max-code` | `CODEXEC_MAX_CODE` | `16MiB` |",
		"| `--sandbox` | `CODEXEC_SANDBOX` | `auto` |",
		"| `--timeout` | `CODEXEC_TIMEOUT` | `1m0s` |",
		"| `--no-index` | `CODEXEC_NO_INDEX` | `false` |",
		"| `--baselines` |  | `true` |",
	} {
		if !strings.Contains(gen, row) {
			t.Errorf("the reference has no row starting %q", row)
		}
	}
	if strings.Contains(gen, defaultDataDir()) {
		t.Errorf("the reference holds this machine's data directory %q", defaultDataDir())
	}
}

// TestConfigurationReferenceMachineIndependent renders the reference for
// two users with different data directories and expects the same page.
func TestConfigurationReferenceMachineIndependent(t *testing.T) {
	clearCodexecEnv(t)
	var pages []string
	for _, home := range []string{t.TempDir(), t.TempDir()} {
		t.Setenv("XDG_DATA_HOME", home)
		gen, err := configurationReference(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, gen)
	}
	if pages[0] != pages[1] {
		t.Errorf("the reference depends on $XDG_DATA_HOME (%s)", firstDifference(pages[0], pages[1]))
	}
}

// TestConfigurationReferenceRefusesEnv: a set CODEXEC_ variable would become
// a default in the page, so rendering refuses.
func TestConfigurationReferenceRefusesEnv(t *testing.T) {
	clearCodexecEnv(t)
	t.Setenv("CODEXEC_POOL", "gpu")
	if _, err := configurationReference(context.Background()); err == nil || !strings.Contains(err.Error(), "CODEXEC_POOL") {
		t.Errorf("rendering with $CODEXEC_POOL set: err = %v, want one naming it", err)
	}
}

func TestParseFlagHelp(t *testing.T) {
	t.Parallel()
	text := "Usage of codexec x:\n" +
		"  -a\n    \taccept things ($CODEXEC_A)\n" +
		"  -b duration\n    \thow long (default: derived) ($CODEXEC_B) (default 2m0s)\n" +
		"  -c string\n    \tpackage index (default PyPI) ($CODEXEC_C)\n" +
		"  -d value\n    \tlimits over (a, b) ($CODEXEC_D) (default memory=1GiB,cpu=10m)\n" +
		"  -e string\n    \tmodes (default \"zygote,spawn\")\n" +
		"  -f\n    \tfirst line\n    \tsecond line (default true)\n"
	got, err := parseFlagHelp(text)
	if err != nil {
		t.Fatal(err)
	}
	want := []flagDoc{
		{Name: "a", Help: "accept things", Env: "CODEXEC_A"},
		{Name: "b", Type: "duration", Help: "how long (default: derived)", Env: "CODEXEC_B", Default: "2m0s", Shown: true},
		{Name: "c", Type: "string", Help: "package index (default PyPI)", Env: "CODEXEC_C"},
		{Name: "d", Type: "value", Help: "limits over (a, b)", Env: "CODEXEC_D", Default: "memory=1GiB,cpu=10m", Shown: true},
		{Name: "e", Type: "string", Help: "modes", Default: "zygote,spawn", Shown: true},
		{Name: "f", Help: "first line second line", Default: "true", Shown: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseFlagHelp:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"  -x\n", "    \thelp first\n", "  -x\n    \th\nstray line\n"} {
		if _, err := parseFlagHelp(bad); err == nil {
			t.Errorf("parseFlagHelp(%q) accepted it", bad)
		}
	}
}

func TestSpliceReference(t *testing.T) {
	t.Parallel()
	doc := "# title\n\nprose\n\n" + referenceBegin + "\nold\n" + referenceEnd + "\n\nmore prose\n"
	out, err := spliceReference(doc, "new\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := "# title\n\nprose\n\n" + referenceBegin + "\nnew\n" + referenceEnd + "\n\nmore prose\n"; out != want {
		t.Errorf("spliced:\n%s\nwant:\n%s", out, want)
	}
	if got, err := generatedPart(out); err != nil || got != "new\n" {
		t.Errorf("generatedPart = %q, %v; want %q", got, err, "new\n")
	}
	for _, bad := range []string{"no markers", referenceBegin + " no end", referenceEnd + referenceBegin, referenceBegin + referenceBegin + referenceEnd} {
		if _, err := spliceReference(bad, "x"); err == nil {
			t.Errorf("spliceReference(%q) accepted it", bad)
		}
	}
}
