package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"

	"github.com/codexec/codexec/cmd/codexec/internal/bench"
	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/worker/limits"
)

// Main runs the codexec command line with args (without the program name)
// and returns the process exit code. Logs go to stderr, never to stdout.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	defer startCPUProfile(stderr)()
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
	case "batch":
		err = runBatch(ctx, args[1:], stdout, stderr)
	case "export":
		err = runExport(ctx, args[1:], stdout, stderr)
	case "status":
		err = runStatus(ctx, args[1:], stdout, stderr)
	case "token":
		err = runToken(args[1:], stdout, stderr)
	case "admin":
		err = runAdmin(ctx, args[1:], stdout, stderr)
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
		if !errors.As(err, new(reported)) {
			fmt.Fprintf(stderr, "codexec %s: %v\n", args[0], err)
		}
		if errors.As(err, new(flagenv.UsageError)) {
			return 2
		}
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
  codexec batch [flags]      run a directory of scripts, or a script per row of a parameter file; batch status|results|cancel ID
  codexec export [flags]     write sessions' code files and recorded runs as plain files (--out DIR)
  codexec status [flags]     the cluster at a glance: workers, queues, jobs per second (--watch, --json)
  codexec token [flags]      print a new API token and its line for the --auth-tokens file
  codexec admin audit|...    operator's commands: tenants' audit records as JSON Lines
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

// newFlags returns the flags of command name ("codexec name").
func newFlags(name string, out io.Writer) *flagenv.Flags {
	return flagenv.New("codexec "+name, out)
}

// limitSet registers a flag holding a limits.Set, written as limits.Parse
// reads it and read over base: keys given replace base's, "key=none"
// removes one and "none" all. Its help shows base as the default.
func limitSet(f *flagenv.Flags, p *limits.Set, name, env string, base limits.Set, help string) {
	flagenv.Value(f, p, name, env, base,
		func(v string) (limits.Set, error) { return limits.ParseOver(base, v) },
		func(limits.Set) string { return base.String() }, help)
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
