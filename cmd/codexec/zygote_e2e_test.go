package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/mark3labs/mcp-go/client"
)

var (
	zygoteReadyRe = regexp.MustCompile(`msg="zygote ready"`)
	jobIDRe       = regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}`)
)

// waitForZygote waits until codexec dev's log says its warm interpreter is
// ready, so that the calls after it run in a forked child.
func waitForZygote(t *testing.T, stderr *e2e.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := e2e.WaitForOutput(ctx, stderr, zygoteReadyRe, nil); err != nil {
		t.Fatalf("zygote: %v", err)
	}
}

// The semantics of `python script.py`, through a real MCP client, in a
// worker that forks jobs from a warm interpreter: each case also runs in a
// worker that spawns a fresh interpreter per job, and the two must agree.
func TestDevZygoteSemantics(t *testing.T) {
	t.Parallel()
	zygoteDir, spawnDir := t.TempDir(), t.TempDir()
	zc, zlog := devStdio(t, zygoteDir, "CODEXEC_EXEC_MODE=zygote")
	sc, _ := devStdio(t, spawnDir, "CODEXEC_EXEC_MODE=spawn")
	waitForZygote(t, zlog)

	// decimal is preloaded by default: in a forked child it is imported
	// before the script starts, in a fresh interpreter it is not.
	_, er := call(t, zc, "execute_code", map[string]any{"code": "import sys\nprint('decimal' in sys.modules)"})
	if er.Stdout != "True\n" {
		t.Fatalf("the job did not run in the zygote: %+v", er)
	}
	_, er = call(t, sc, "execute_code", map[string]any{"code": "import sys\nprint('decimal' in sys.modules)"})
	if er.Stdout != "False\n" {
		t.Fatalf("the job did not run in a fresh interpreter: %+v", er)
	}

	tests := []struct {
		name string
		code string
		// status and exitCode are what both must report.
		status   string
		exitCode int
	}{
		{"main module", "import sys\nprint(__name__, sys.argv == [__file__], __file__.endswith('_script.py'))", "ok", 0},
		{"traceback file and line", "print('before')\n\ndef f():\n    raise ValueError('boom')\nf()", "error", 1},
		{"syntax error", "x = = 1", "error", 1},
		{"sys.exit code", "import sys\nprint('x')\nsys.exit(3)", "error", 3},
		{"sys.exit message", "import sys\nsys.exit('fatal: missing input')", "error", 1},
		{"sys.exit zero", "import sys\nsys.exit(0)", "ok", 0},
		{"os._exit", "import os\nos._exit(9)", "error", 9},
		{"self signal", "import os, signal\nprint('bye', flush=True)\nos.kill(os.getpid(), signal.SIGTERM)", "error", -1},
		{"KeyboardInterrupt", "raise KeyboardInterrupt", "error", -1},
		{"input at EOF", "name = input('name? ')", "error", 1},
		{"flushed at exit", "import sys\nsys.stdout.write('no newline')\nsys.stderr.write('err')", "ok", 0},
		{"atexit", "import atexit\natexit.register(print, 'at exit')\nprint('main')", "ok", 0},
		{"non-daemon thread joined", "import threading, time\nprint('main')\n" +
			"threading.Thread(target=lambda: (time.sleep(0.2), print('thread'))).start()", "ok", 0},
		{"__del__ at exit", "class A:\n    def __del__(self):\n        print('collected')\na = A()", "ok", 0},
		{"warning", "import warnings\nwarnings.warn('careful')", "ok", 0},
		{"environment", "import os\nprint(sorted(k for k in os.environ if k != 'LC_CTYPE'))", "ok", 0},
	}
	norm := func(s, dataDir string) string {
		return jobIDRe.ReplaceAllString(strings.ReplaceAll(s, dataDir, "DATA"), "JOB")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Not parallel: each call is quick, and the two servers share
			// one session each.
			zres, z := call(t, zc, "execute_code", map[string]any{"code": tt.code})
			sres, s := call(t, sc, "execute_code", map[string]any{"code": tt.code})
			if z.Status != tt.status || z.ExitCode != tt.exitCode || zres.IsError != (tt.status != "ok") {
				t.Errorf("zygote: status %s exit %d isError %v; want %s %d\n%+v", z.Status, z.ExitCode, zres.IsError, tt.status, tt.exitCode, z)
			}
			if z.Status != s.Status || z.ExitCode != s.ExitCode || z.Signal != s.Signal || zres.IsError != sres.IsError ||
				norm(z.Stdout, zygoteDir) != norm(s.Stdout, spawnDir) || norm(z.Stderr, zygoteDir) != norm(s.Stderr, spawnDir) {
				t.Errorf("zygote and spawn differ:\nzygote %+v\nspawn  %+v", z, s)
			}
		})
	}

	t.Run("timeout kills the process group", func(t *testing.T) {
		testTimeoutKillsGroup(t, zc)
	})
	t.Run("a job cannot change the next one", func(t *testing.T) {
		call(t, zc, "execute_code", map[string]any{"code": "import json, os\njson.dumps = None\nos.environ['LEAK'] = '1'\nos.chdir('/')"})
		_, er := call(t, zc, "execute_code", map[string]any{"code": "import json, os\nprint(json.dumps([1]), 'LEAK' in os.environ, os.getcwd() == os.environ['HOME'])"})
		if er.Stdout != "[1] False True\n" {
			t.Fatalf("got %+v", er)
		}
	})
}

// testTimeoutKillsGroup checks that a timeout kills the job and what it
// started in the background.
func testTimeoutKillsGroup(t *testing.T, c *client.Client) {
	t.Helper()
	code := "import subprocess, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" +
		"p = subprocess.Popen(['sleep', '300'])\nopen('child.pid','w').write(str(p.pid))\nprint('started', flush=True)\nwhile True: pass\n"
	res, er := call(t, c, "execute_code", map[string]any{"code": code, "timeout_seconds": 1.5})
	if !res.IsError || er.Status != "timeout" || er.Stdout != "started\n" {
		t.Fatalf("isError=%v %+v", res.IsError, er)
	}
	_, chk := call(t, c, "execute_code", map[string]any{"code": "import os\npid=int(open('child.pid').read())\n" +
		"try:\n    os.kill(pid, 0); st=open(f'/proc/{pid}/stat').read().split()[2]; print('alive', st)\nexcept ProcessLookupError:\n    print('gone')"})
	if chk.Stdout != "gone\n" && !strings.HasPrefix(chk.Stdout, "alive Z") {
		t.Fatalf("background child outlived the timeout: %q", chk.Stdout)
	}
}
