package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"golang.org/x/sys/unix"
)

// codexec never runs jobs unconfined unless told to: `codexec dev` told to
// use bubblewrap, with a bubblewrap that cannot work (here a binary that
// does not exist), refuses to start and says how to get a sandbox or how to
// go without one; with --sandbox off it starts and says that jobs run
// unconfined. On its defaults it needs no bubblewrap at all: it starts
// sandboxed by its built-in launcher. It once served, with every job running as the worker's user
// (root, reading /etc/shadow and the state store), after a warning in a log
// an MCP client never shows.
//
// stdin is empty, so a codexec that started serves an MCP session that ends
// at once, and exits 0: the test tells a refusal from a start by the exit
// status and the log alone, with no waiting.
func TestDevWithoutSandboxFailsClosed(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, args ...string) (int, string) {
		t.Helper()
		// Not codexecEnv: these runs must get codexec's own default mode,
		// whatever the machine; and no bubblewrap, on PATH or elsewhere.
		cmd := exec.Command(os.Args[0], append([]string{"dev"}, args...)...)
		cmd.Env = e2e.CleanEnv("CODEXEC_E2E_MAIN=1", "CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
			"CODEXEC_BWRAP=/nonexistent/bwrap", "PATH="+pathWithout(t, "bwrap"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, out.String()
		case errors.As(err, &exit):
			return exit.ExitCode(), out.String()
		}
		t.Fatalf("codexec dev: %v\n%s", err, out.String())
		return 0, ""
	}
	for _, args := range [][]string{nil, {"--sandbox", "auto"}, {"--sandbox", "require"}} {
		t.Run(fmt.Sprintf("%q", args), func(t *testing.T) {
			t.Parallel()
			code, log := run(t, append(args, "--sandbox-launcher", "bwrap")...)
			if code == 0 || strings.Contains(log, "codexec dev ready") {
				t.Fatalf("codexec dev without a working sandbox started (exit %d):\n%s", code, log)
			}
			for _, want := range []string{"/nonexistent/bwrap not found", "apt-get install bubblewrap", "--sandbox off"} {
				if !strings.Contains(log, want) {
					t.Errorf("the refusal does not say %q:\n%s", want, log)
				}
			}
		})
	}
	t.Run("defaults without bubblewrap", func(t *testing.T) {
		t.Parallel()
		requireSandbox(t)
		code, log := run(t)
		if code != 0 || !strings.Contains(log, "codexec dev ready") {
			t.Fatalf("codexec dev on its defaults, without bubblewrap, did not start (exit %d):\n%s", code, log)
		}
		if !strings.Contains(log, "sandbox ready") || !strings.Contains(log, "launcher=builtin") || strings.Contains(log, "sandbox off") {
			t.Errorf("codexec dev on its defaults did not start sandboxed by the built-in launcher:\n%s", log)
		}
	})
	t.Run("--sandbox off", func(t *testing.T) {
		t.Parallel()
		code, log := run(t, "--sandbox", "off")
		if code != 0 || !strings.Contains(log, "codexec dev ready") {
			t.Fatalf("codexec dev --sandbox off did not start (exit %d):\n%s", code, log)
		}
		if !strings.Contains(log, "sandbox off: jobs run unconfined") {
			t.Errorf("codexec dev --sandbox off did not say that jobs run unconfined:\n%s", log)
		}
	})
}

// pathWithout is $PATH without the directories that hold name.
func pathWithout(t *testing.T, name string) string {
	t.Helper()
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			keep = append(keep, dir)
		}
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// An open_files limit that the pool's maximum allows but the host's hard
// RLIMIT_NOFILE does not (which jobs inherit and cannot raise) is refused
// up front, naming the real maximum: the worker caps the pool's maximum to
// the hard limit at start-up. Such a job once started and failed with exit
// 126. A job may still ask for the hard limit itself, and gets it.
func TestDevOpenFilesCappedToHostHardLimit(t *testing.T) {
	t.Parallel()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Max == unix.RLIM_INFINITY || rl.Max >= 1<<30 {
		t.Skipf("hard RLIMIT_NOFILE %d: no limit to cap to", rl.Max)
	}
	hard := int64(rl.Max)
	// The pool's maximum is above the hard limit whatever the host's is.
	c, log := devStdio(t, t.TempDir(), fmt.Sprintf("CODEXEC_MAX_LIMITS=nofile=%d", hard+1000))

	res, er := call(t, c, "execute_code", map[string]any{"code": "print('ran')", "limits": map[string]any{"open_files": hard + 1}})
	if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, fmt.Sprintf("open_files %d is above this pool's maximum of %d", hard+1, hard)) {
		t.Fatalf("open_files above the host's hard limit: isError=%v %+v", res.IsError, er)
	}
	res, er = call(t, c, "execute_code", map[string]any{
		"code":   "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))",
		"limits": map[string]any{"open_files": hard},
	})
	if res.IsError || er.Stdout != fmt.Sprintf("(%d, %d)\n", hard, hard) {
		t.Fatalf("open_files at the host's hard limit: isError=%v %+v", res.IsError, er)
	}
	if !strings.Contains(log.String(), "capped to this host's hard limit") {
		t.Errorf("the worker did not log the cap:\n%s", log.String())
	}
}

// install_dependencies and check_installed_packages take a list: a string
// is refused, saying so, and nothing is built. A string was once taken as
// a one-item list.
func TestDevPackagesMustBeAList(t *testing.T) {
	t.Parallel()
	c, _ := devStdio(t, t.TempDir())
	for _, tool := range []string{"install_dependencies", "check_installed_packages", "configure_environment"} {
		args := map[string]any{"packages": "numpy"}
		if tool == "configure_environment" {
			args["type"] = "venv"
		}
		res, er := envCall(t, c, tool, args)
		if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, "must be a list of strings") {
			t.Errorf("%s with a string: isError=%v %+v", tool, res.IsError, er)
		}
	}
	if _, er := envCall(t, c, "get_environment_config", nil); er.EnvID != "default" {
		t.Fatalf("a refused call changed the environment: %+v", er)
	}
}
