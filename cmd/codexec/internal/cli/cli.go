package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/bench"
	"github.com/codexec/codexec/worker/limits"
)

// Main runs the codexec command line with args (without the program name)
// and returns the process exit code. Logs go to stderr, never to stdout.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	var err error
	switch args[0] {
	case "dev":
		err = runDev(ctx, args[1:], stdin, stdout, stderr)
	case "frontend":
		err = runFrontend(ctx, args[1:], stdin, stdout, stderr)
	case "worker":
		err = runWorker(ctx, args[1:], stderr)
	case "bench":
		err = bench.Main(ctx, args[1:], stdout, stderr)
		if errors.As(err, new(bench.UsageError)) {
			err = usageError{err}
		}
	case "export":
		err = runExport(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "codexec", Version())
		return 0
	case "help", "-h", "--help", "-help":
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "codexec: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "codexec %s: %v\n", args[0], err)
			return 2
		}
		fmt.Fprintf(stderr, "codexec %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprint(w, `codexec: an MCP server that runs Python for language models.

Usage:
  codexec dev [flags]        everything in one process, no external services (MCP on stdio, or --http)
  codexec frontend [flags]   the MCP frontend of a cluster (needs NATS with JetStream, and Redis)
  codexec worker [flags]     a worker of a cluster (needs NATS with JetStream, and Redis)
  codexec bench [flags]      measure execute_code latency and throughput through real MCP clients
  codexec export [flags]     write sessions' code files and recorded runs as plain files (--out DIR)
  codexec version            print the version

Run "codexec <command> -h" for a command's flags. Every flag can also be set
with the environment variable shown in its help.
`)
}

// Version is the module version codexec was built from.
func Version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

type usageError struct{ error }

// flags wraps a FlagSet whose flags take their defaults from environment
// variables, named in each flag's help.
type flags struct {
	*flag.FlagSet
	errs []error
}

func newFlags(name string, out io.Writer) *flags {
	fs := flag.NewFlagSet("codexec "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	return &flags{FlagSet: fs}
}

func (f *flags) str(p *string, name, env, def, help string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		def = v
	}
	f.StringVar(p, name, def, help+" ($"+env+")")
}

func (f *flags) boolean(p *bool, name, env string, def bool, help string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = b
	}
	f.BoolVar(p, name, def, help+" ($"+env+")")
}

func (f *flags) integer(p *int, name, env string, def int, help string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = n
	}
	f.IntVar(p, name, def, help+" ($"+env+")")
}

func (f *flags) duration(p *time.Duration, name, env string, def time.Duration, help string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = d
	}
	f.DurationVar(p, name, def, help+" ($"+env+")")
}

func (f *flags) bytes(p *int64, name, env string, def int64, help string) {
	if v, ok := os.LookupEnv(env); ok && v != "" {
		n, err := parseBytes(v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = n
	}
	*p = def
	f.Func(name, fmt.Sprintf("%s ($%s) (default %s)", help, env, formatBytes(def)), func(s string) error {
		n, err := parseBytes(s)
		if err == nil {
			*p = n
		}
		return err
	})
}

// choice is a string flag whose value must be one of options.
func (f *flags) choice(p *string, name, env, def string, options []string, help string) {
	check := func(v string) error {
		if !slices.Contains(options, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(options, ", "))
		}
		return nil
	}
	if v, ok := os.LookupEnv(env); ok && v != "" {
		if err := check(v); err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
		}
		def = v
	}
	*p = def
	f.Func(name, fmt.Sprintf("%s ($%s) (default %s)", help, env, def), func(s string) error {
		if err := check(s); err != nil {
			return err
		}
		*p = s
		return nil
	})
}

// limitSet is a flag holding a limits.Set, written as limits.Parse reads it
// and read over base: keys given replace base's, "key=none" removes one and
// "none" all.
func (f *flags) limitSet(p *limits.Set, name, env string, base limits.Set, help string) {
	*p = base
	if v, ok := os.LookupEnv(env); ok && v != "" {
		s, err := limits.ParseOver(base, v)
		if err != nil {
			f.errs = append(f.errs, fmt.Errorf("$%s: %w", env, err))
		}
		*p = s
	}
	f.Func(name, fmt.Sprintf("%s ($%s) (default %s)", help, env, base), func(v string) error {
		s, err := limits.ParseOver(base, v)
		if err == nil {
			*p = s
		}
		return err
	})
}

func (f *flags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if f.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments: %s", strings.Join(f.Args(), " "))}
	}
	if len(f.errs) > 0 {
		return usageError{errors.Join(f.errs...)}
	}
	return nil
}

// parseBytes reads "1048576", "512KiB", "1MiB", "1M", "2GiB".
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (use e.g. 1048576, 512KiB, 1MiB)", s)
	}
	return n * mult, nil
}

func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("invalid log level %q (debug, info, warn, error)", level)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// defaultDataDir is $CODEXEC_DATA_DIR's default: $XDG_DATA_HOME/codexec, or
// ~/.local/share/codexec.
func defaultDataDir() string {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "codexec")
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".local", "share", "codexec")
	}
	return filepath.Join(os.TempDir(), "codexec")
}
