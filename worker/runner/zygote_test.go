//go:build linux

package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// testPreload is what the tests' zygotes import: enough to have shared
// state worth protecting (json, threading) without a long start.
var testPreload = []string{"json", "threading", "random"}

// sharedZygote is one zygote for the tests that only need some zygote. It
// dies with the test binary (its parent-death signal).
var sharedZygote = sync.OnceValues(func() (*Zygote, error) {
	p, err := python()
	if err != nil {
		return nil, err
	}
	return StartZygote(context.Background(), ZygoteConfig{
		Python: p, Env: ChildEnv(nil, "", "", nil, nil), Preload: testPreload,
	})
})

func zygote(tb testing.TB) *Zygote {
	tb.Helper()
	if _, err := python(); err != nil {
		tb.Skipf("no python3 to run jobs with: %v", err)
	}
	z, err := sharedZygote()
	if err != nil {
		tb.Fatalf("StartZygote: %v", err)
	}
	return z
}

// startZygote starts a zygote of the test's own, closed at cleanup.
func startZygote(tb testing.TB, cfg ZygoteConfig) *Zygote {
	tb.Helper()
	p, err := python()
	if err != nil {
		tb.Skipf("no python3 to run jobs with: %v", err)
	}
	if cfg.Python == "" {
		cfg.Python = p
	}
	z, err := StartZygote(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("StartZygote: %v", err)
	}
	tb.Cleanup(func() { z.Close() })
	return z
}

func zrun(tb testing.TB, z *Zygote, s Spec) Outcome {
	tb.Helper()
	return runWith(tb, z, s)
}

// A job forked from a zygote behaves like `python script.py`: each case
// runs both ways and the outcomes must be identical.
func TestZygoteSemanticsMatchSpawn(t *testing.T) {
	t.Parallel()
	// Before 3.10, an unexpected end of file points one line further when
	// the parser reads a file than when it reads a string.
	minMinor := map[string]int{"syntax error at end of file": 10}
	tests := []struct {
		name string
		src  string
	}{
		{"print", "print(1)\n"},
		{"main module", "import sys\nprint(__name__, __file__ == sys.argv[0], __spec__, __package__, __doc__, __cached__)\n" +
			"print(type(__loader__).__name__, sys.modules['__main__'] is sys.modules[__name__])\n" +
			"print(list(globals()))\n"},
		{"docstring", "'''the doc'''\nprint(__doc__)\n"},
		{"argv and path", "import os, sys\nprint(sys.argv, sys.path[0] == os.path.dirname(os.path.realpath(__file__)), '' in sys.path)\n"},
		{"orig_argv", "import sys\nprint(getattr(sys, 'orig_argv', ['x', sys.argv[0]])[1:])\n"},
		{"cwd", "import os\nprint(os.getcwd())\n"},
		{"exception", "print('before')\nx = 1\nraise ValueError('bad value')\n"},
		{"nested traceback", "def f():\n    g()\n\ndef g():\n    1/0\n\nf()\n"},
		{"chained exceptions", "try:\n    {}['k']\nexcept KeyError as e:\n    raise RuntimeError('wrapped') from e\n"},
		{"context exception", "try:\n    1/0\nexcept ZeroDivisionError:\n    raise ValueError('during')\n"},
		{"syntax error", "print('never')\nx = = 1\n"},
		{"syntax error at end of file", "print('never')\nx = (\n"},
		{"indentation error", "if True:\nprint(1)\n"},
		{"sys.exit int", "import sys\nprint('out')\nsys.exit(3)\n"},
		{"sys.exit none", "import sys\nsys.exit()\n"},
		{"sys.exit message", "import sys\nsys.exit('fatal: no input')\n"},
		{"sys.exit object", "import sys\nsys.exit(['a', 1])\n"},
		{"sys.exit 256", "import sys\nsys.exit(256)\n"},
		{"sys.exit -1", "import sys\nsys.exit(-1)\n"},
		{"sys.exit True", "import sys\nsys.exit(True)\n"},
		{"raise SystemExit in function", "def f():\n    raise SystemExit(4)\nf()\n"},
		{"os._exit skips atexit", "import atexit, os, sys\natexit.register(lambda: print('atexit'))\nsys.stdout.write('unflushed')\nos._exit(7)\n"},
		{"self SIGKILL", "import os\nprint('bye', flush=True)\nos.kill(os.getpid(), 9)\n"},
		{"self SIGTERM", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n"},
		{"SIGINT is KeyboardInterrupt", "import os, signal\nos.kill(os.getpid(), signal.SIGINT)\nprint('not reached')\n"},
		{"KeyboardInterrupt caught", "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt:\n    print('caught')\n"},
		{"signal handlers", "import signal\nprint([str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE, signal.SIGHUP, signal.SIGUSR1)])\n" +
			"print(sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])))\n"},
		{"input at EOF", "input('name? ')\n"},
		{"stdin", "import sys\nprint(repr(sys.stdin.read()), sys.stdin.isatty(), sys.stdin.seekable())\n"},
		{"stdio objects", "import sys\nfor f in (sys.stdout, sys.stderr):\n    print(f.encoding, f.errors, f.line_buffering, f.isatty(), f.seekable(), f.fileno())\n"},
		{"output flushed at exit", "import sys\nsys.stdout.write('no newline, no flush')\nsys.stderr.write('err too')\n"},
		{"large buffered output", "import sys\nsys.stdout.write('z' * 300000)\n"},
		{"atexit", "import atexit\natexit.register(print, 'second')\natexit.register(print, 'first')\nprint('main')\n"},
		{"atexit error", "import atexit\ndef bad():\n    raise RuntimeError('in atexit')\natexit.register(bad)\n"},
		{"non-daemon thread joined", "import threading, time\ndef work():\n    time.sleep(0.2)\n    print('thread done')\n" +
			"print('main done')\nthreading.Thread(target=work).start()\n"},
		{"daemon thread not joined", "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\nprint('main done')\n"},
		{"__del__ at exit", "class A:\n    def __del__(self):\n        print('del', self.n)\na = A()\na.n = 1\n"},
		{"unclosed file flushed", "f = open('out.txt', 'w')\nf.write('data')\nimport atexit\n" +
			"atexit.register(lambda: None)\n"},
		{"excepthook", "import sys\nsys.excepthook = lambda t, v, tb: print('hook:', t.__name__, v)\nraise ValueError('x')\n"},
		{"warnings", "import warnings\nwarnings.warn('careful')\nwarnings.warn('old', DeprecationWarning)\n"},
		{"pickle main class", "import pickle\nclass P:\n    pass\nprint(type(pickle.loads(pickle.dumps(P()))).__name__)\n"},
		{"inspect source", "import inspect\ndef f():\n    return 42\nprint(inspect.getsource(f), end='')\n"},
		{"first file descriptor", "import os\nprint(os.open(os.devnull, os.O_RDONLY))\n"},
		{"subprocess", "import subprocess, sys\nprint(subprocess.run([sys.executable, '-c', 'print(2)'], capture_output=True, text=True).stdout, end='')\n"},
		{"fork", "import os\npid = os.fork()\nif pid == 0:\n    print('child')\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('parent')\n"},
		{"environment", "import os\nprint(sorted(k for k in os.environ if k != 'LC_CTYPE'), os.environ.get('HOME'))\n"},
		{"coding cookie", "# -*- coding: latin-1 -*-\nprint(len('\xe9'))\n"},
		{"future annotations", "from __future__ import annotations\ndef f(x: Undefined) -> None: pass\nprint(f.__annotations__)\n"},
		{"stdout closed", "import sys, os\nprint('x')\nsys.stdout.close()\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			z := zygote(t)
			if m := minMinor[tt.name]; m > 0 && pythonMinor(z) < m {
				t.Skipf("differs before Python 3.%d", m)
			}
			b := setup(t)
			s := b.spec(t, tt.src)
			want := run(t, s)
			got := zrun(t, z, s)
			// Object addresses differ from run to run, whichever way.
			for _, o := range []*Outcome{&want, &got} {
				o.Stdout = addrRe.ReplaceAll(o.Stdout, []byte("0x..."))
				o.Stderr = addrRe.ReplaceAll(o.Stderr, []byte("0x..."))
			}
			if got.ExitCode != want.ExitCode || got.Signal != want.Signal ||
				!bytes.Equal(got.Stdout, want.Stdout) || !bytes.Equal(got.Stderr, want.Stderr) {
				t.Errorf("zygote and spawn differ\nspawn:  exit %d signal %q\nstdout %q\nstderr %q\nzygote: exit %d signal %q\nstdout %q\nstderr %q",
					want.ExitCode, want.Signal, want.Stdout, want.Stderr, got.ExitCode, got.Signal, got.Stdout, got.Stderr)
			}
			if bytes.Contains(got.Stderr, []byte("codexec")) {
				t.Errorf("the zygote shows through: %s", got.Stderr)
			}
		})
	}
}

func pythonMinor(z *Zygote) int {
	var major, minor int
	fmt.Sscanf(z.Info().Version, "%d.%d", &major, &minor)
	return minor
}

var addrRe = regexp.MustCompile(`0x[0-9a-f]{6,}`)

// A few cases where the outcome itself (not just parity) is worth stating.
// outcomeCases are jobs whose outcome must be what `python job.py` gives,
// however the job's process comes to life (plain or sandboxed zygote).
var outcomeCases = []struct {
	name      string
	src       string
	exitCode  int
	signal    string
	stdout    string
	stderrHas string
}{
	{name: "traceback names the script", src: "print('before')\nx = 1\nraise ValueError('bad value')\n",
		exitCode: 1, stdout: "before\n", stderrHas: "job.py\", line 3, in <module>\n    raise ValueError('bad value')\nValueError: bad value\n"},
	{name: "sys.exit message", src: "import sys\nsys.exit('no input')\n", exitCode: 1, stderrHas: "no input\n"},
	{name: "os._exit", src: "import os\nos._exit(7)\n", exitCode: 7},
	{name: "self-signal", src: "import os\nos.kill(os.getpid(), 9)\n", exitCode: -1, signal: "killed"},
	{name: "self-SIGTERM, default action", src: "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\nimport time\ntime.sleep(5)\n", exitCode: -1, signal: "terminated"},
	{name: "KeyboardInterrupt ends by SIGINT", src: "raise KeyboardInterrupt\n", exitCode: -1, signal: "interrupt", stderrHas: "KeyboardInterrupt"},
	{name: "input at EOF", src: "input('name? ')\n", exitCode: 1, stdout: "name? ", stderrHas: "EOFError"},
	{name: "flushed at exit", src: "import sys\nsys.stdout.write('partial')\n", stdout: "partial"},
	{name: "atexit", src: "import atexit\natexit.register(print, 'bye')\n", stdout: "bye\n"},
	{name: "thread joined", src: "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.1), print('late'))).start()\n", stdout: "late\n"},
	{name: "leads its own session", src: "import os\nprint(os.getsid(0) == os.getpid() == os.getpgid(0))\n", stdout: "True\n"},
}

func checkOutcome(t *testing.T, out Outcome, exitCode int, signal, stdout, stderrHas string) {
	t.Helper()
	if out.ExitCode != exitCode || out.Signal != signal {
		t.Errorf("exit code %d, signal %q; want %d, %q (stderr %s)", out.ExitCode, out.Signal, exitCode, signal, out.Stderr)
	}
	if string(out.Stdout) != stdout {
		t.Errorf("stdout = %q, want %q", out.Stdout, stdout)
	}
	if !bytes.Contains(out.Stderr, []byte(stderrHas)) {
		t.Errorf("stderr = %q, want it to contain %q", out.Stderr, stderrHas)
	}
}

func TestZygoteOutcomes(t *testing.T) {
	t.Parallel()
	for _, tt := range outcomeCases {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			out := zrun(t, zygote(t), b.spec(t, tt.src))
			checkOutcome(t, out, tt.exitCode, tt.signal, tt.stdout, tt.stderrHas)
		})
	}
}

// Nothing a job does reaches the zygote, and so the next job.
func TestZygoteJobsCannotChangeIt(t *testing.T) {
	t.Parallel()
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: testPreload})
	b := setup(t)
	other := t.TempDir()
	first := b.spec(t, fmt.Sprintf(`
import json, os, sys, random, threading
json.CHANGED = True
json.dumps = None
os.environ['LEAK'] = '1'
os.chdir(%q)
sys.path.append('/leak')
sys.modules['leak'] = json
random.seed(1)
threading.Thread(target=lambda: None).start()
import email.message
print('changed')
`, other))
	if out := zrun(t, z, first); string(out.Stdout) != "changed\n" {
		t.Fatalf("first job: %s %s", out.Stdout, out.Stderr)
	}
	b2 := setup(t)
	second := b2.spec(t, `
import json, os, sys
print(hasattr(json, 'CHANGED'), json.dumps is None, 'LEAK' in os.environ, os.getcwd() == os.path.dirname(__file__),
      '/leak' in sys.path, 'leak' in sys.modules, 'email.message' in sys.modules)
`)
	out := zrun(t, z, second)
	if string(out.Stdout) != "False False False True False False False\n" {
		t.Errorf("the second job saw the first one's changes: %q %s", out.Stdout, out.Stderr)
	}
	// Each job gets fresh random numbers, not the zygote's sequence.
	rnd := b.spec(t, "import random\nprint(random.random())\n")
	a, c := zrun(t, z, rnd), zrun(t, z, rnd)
	if bytes.Equal(a.Stdout, c.Stdout) {
		t.Errorf("two jobs drew the same random number %s", a.Stdout)
	}
}

func TestZygoteConcurrentJobs(t *testing.T) {
	t.Parallel()
	z := zygote(t)
	b := setup(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			script := filepath.Join(b.dir, fmt.Sprintf("job%d.py", i))
			if err := os.WriteFile(script, fmt.Appendf(nil, "import time\ntime.sleep(0.05)\nprint(%d)\n", i), 0o644); err != nil {
				t.Error(err)
				return
			}
			for range 5 {
				out, err := z.Run(context.Background(), Spec{Python: b.python, Script: script, Dir: b.dir, Timeout: time.Minute})
				if err != nil || string(out.Stdout) != fmt.Sprintf("%d\n", i) || out.ExitCode != 0 {
					t.Errorf("job %d: %v %q %q", i, err, out.Stdout, out.Stderr)
					return
				}
			}
		})
	}
	wg.Wait()
}

// A module that fails to import is skipped, not fatal.
func TestZygotePreloadFailure(t *testing.T) {
	t.Parallel()
	z := startZygote(t, ZygoteConfig{Preload: []string{"json", "no_such_module_codexec", "sys"}})
	info := z.Info()
	if !strings.Contains(info.Failed["no_such_module_codexec"], "ModuleNotFoundError") || len(info.Preloaded) != 2 {
		t.Errorf("Info = %+v", info)
	}
	b := setup(t)
	if out := zrun(t, z, b.spec(t, "print(1)\n")); string(out.Stdout) != "1\n" {
		t.Errorf("stdout %q stderr %q", out.Stdout, out.Stderr)
	}
	if z.RSS() <= 0 || info.PID <= 0 {
		t.Errorf("RSS %d, PID %d", z.RSS(), info.PID)
	}
}

// Imports that start threads make a zygote unsafe to fork: it is refused.
func TestZygoteThreadsAtImport(t *testing.T) {
	t.Parallel()
	mods := t.TempDir()
	for name, src := range map[string]string{
		"starts_thread.py":   "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True, name='poller').start()\n",
		"starts_native.py":   "import _thread, time\n_thread.start_new_thread(time.sleep, (60,))\n",
		"harmless_mod.py":    "X = 1\n",
		"exits_at_import.py": "import sys\nsys.exit(3)\n",
	} {
		if err := os.WriteFile(filepath.Join(mods, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := python()
	if err != nil {
		t.Skip(err)
	}
	env := ChildEnv(nil, "", "", nil, map[string]string{"PYTHONPATH": mods})
	for _, mod := range []string{"starts_thread", "starts_native"} {
		t.Run(mod, func(t *testing.T) {
			t.Parallel()
			z, err := StartZygote(context.Background(), ZygoteConfig{Python: p, Env: env, Preload: []string{"harmless_mod", mod}})
			if !errors.Is(err, ErrZygoteUnsafe) {
				if z != nil {
					z.Close()
				}
				t.Fatalf("StartZygote = %v, want ErrZygoteUnsafe", err)
			}
			if mod == "starts_thread" && !strings.Contains(err.Error(), "poller") {
				t.Errorf("error does not name the thread: %v", err)
			}
		})
	}
	t.Run("pool runs the environment with spawn", func(t *testing.T) {
		t.Parallel()
		pool := startPool(t, PoolConfig{Preload: []string{"starts_thread"}})
		b := setup(t)
		s := b.spec(t, "import sys\nprint('starts_thread' in sys.modules)\n")
		s.Env = env
		if err := pool.Warm(context.Background(), s); !errors.Is(err, ErrZygoteUnsafe) {
			t.Fatalf("Warm = %v, want ErrZygoteUnsafe", err)
		}
		out, err := pool.Run(context.Background(), s)
		if err != nil || string(out.Stdout) != "False\n" {
			t.Fatalf("Run = %v, stdout %q stderr %q: want a spawned interpreter", err, out.Stdout, out.Stderr)
		}
		if st := pool.stats(); len(st) != 1 || st[0].State != "unsafe" {
			t.Errorf("stats = %+v", st)
		}
	})
	t.Run("module exiting at import", func(t *testing.T) {
		t.Parallel()
		z := startZygote(t, ZygoteConfig{Env: env, Preload: []string{"exits_at_import", "harmless_mod"}})
		if !strings.Contains(z.Info().Failed["exits_at_import"], "SystemExit") {
			t.Errorf("Info = %+v", z.Info())
		}
	})
}

func TestStartZygoteErrors(t *testing.T) {
	t.Parallel()
	if _, err := StartZygote(context.Background(), ZygoteConfig{Python: "python3"}); err == nil {
		t.Error("a relative interpreter path was accepted")
	}
	if _, err := StartZygote(context.Background(), ZygoteConfig{Python: filepath.Join(t.TempDir(), "none")}); err == nil {
		t.Error("a missing interpreter was accepted")
	}
	// An interpreter that exits at once (here: /bin/true) fails the start
	// with its output, instead of hanging.
	if _, err := StartZygote(context.Background(), ZygoteConfig{Python: "/bin/true"}); err == nil {
		t.Error("an interpreter that exits at once was accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := StartZygote(ctx, ZygoteConfig{Python: "/bin/sleep"}); err == nil {
		t.Error("a cancelled start succeeded")
	}
}

// The pool's first job for an environment never waits for its zygote.
func TestPoolDoesNotWaitForAStartingZygote(t *testing.T) {
	t.Parallel()
	mods := t.TempDir()
	if err := os.WriteFile(filepath.Join(mods, "slow_import.py"), []byte("import time\ntime.sleep(30)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pool := startPool(t, PoolConfig{Preload: []string{"slow_import"}})
	b := setup(t)
	s := b.spec(t, "import sys\nprint('slow_import' in sys.modules)\n")
	s.Env = ChildEnv(nil, "", b.dir, nil, map[string]string{"PYTHONPATH": mods})
	began := time.Now()
	for range 3 {
		out, err := pool.Run(context.Background(), s)
		if err != nil || string(out.Stdout) != "False\n" {
			t.Fatalf("Run = %v, %q %q", err, out.Stdout, out.Stderr)
		}
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("three jobs took %v: they waited for the zygote", d)
	}
	if st := pool.stats(); len(st) != 1 || st[0].State != "starting" {
		t.Errorf("stats = %+v, want one starting zygote", st)
	}
}

// startPool starts a pool, stopped at cleanup.
func startPool(t *testing.T, cfg PoolConfig) *Pool {
	t.Helper()
	pool := NewPool(cfg)
	if err := pool.Start(context.Background()); err != nil {
		t.Fatalf("Pool.Start: %v", err)
	}
	t.Cleanup(func() {
		if err := pool.Stop(context.Background()); err != nil {
			t.Errorf("Pool.Stop: %v", err)
		}
	})
	return pool
}

func poolSetup(t *testing.T, cfg PoolConfig) (*Pool, *testBundle, Spec) {
	t.Helper()
	if cfg.Preload == nil {
		cfg.Preload = testPreload
	}
	pool := startPool(t, cfg)
	b := setup(t)
	s := b.spec(t, "import sys\nprint('json' in sys.modules)\n")
	if err := pool.Warm(context.Background(), s); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	return pool, b, s
}

// poolZygote returns the pool's zygote for s.
func poolZygote(t *testing.T, p *Pool, s Spec) *Zygote {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[zygoteKey(s.Python, zygoteEnv(s.Env), p.cfg.Preload)]
	if e == nil || e.z == nil {
		t.Fatal("no zygote for the spec")
	}
	return e.z
}

func TestPoolRunsInZygote(t *testing.T) {
	t.Parallel()
	pool, _, s := poolSetup(t, PoolConfig{})
	out, err := pool.Run(context.Background(), s)
	if err != nil || string(out.Stdout) != "True\n" {
		t.Fatalf("Run = %v, %q %q: want the preloaded json", err, out.Stdout, out.Stderr)
	}
	st := pool.stats()
	if len(st) != 1 || st[0].State != "ready" || st[0].Jobs != 1 || st[0].RSSBytes <= 0 || st[0].PID <= 0 {
		t.Errorf("stats = %+v", st)
	}
}

// Jobs that differ only in codexec's per-job variables (a display
// directory, a batch row's parameters) and HOME share one warm zygote, and
// each sees its own values. Keyed by them, every job started a zygote of its
// own and ran cold in a fresh interpreter while it started.
func TestPoolOneZygoteForJobsWithTheirOwnVariables(t *testing.T) {
	t.Parallel()
	pool, b, _ := poolSetup(t, PoolConfig{})
	s := b.spec(t, "import os, sys\nprint('json' in sys.modules, os.environ.get('CODEXEC_PARAMS'), os.environ.get('CODEXEC_OUTPUT_DIR'))\n")
	base := slices.Clone(s.Env)
	for i, row := range []string{`{"row": 1}`, `{"row": 2}`, `{"row": 3}`} {
		s.Env = append(slices.Clone(base), "CODEXEC_PARAMS="+row, fmt.Sprintf("CODEXEC_OUTPUT_DIR=out/%d", i),
			fmt.Sprintf("CODEXEC_DISPLAY_DIR=.codexec/display/%d", i), fmt.Sprintf("HOME=/h/%d", i))
		out, err := pool.Run(context.Background(), s)
		if want := fmt.Sprintf("True %s out/%d\n", row, i); err != nil || string(out.Stdout) != want {
			t.Fatalf("job %d: %v, stdout %q stderr %q; want %q (run in the warm zygote, with its own variables)", i, err, out.Stdout, out.Stderr, want)
		}
	}
	if st := pool.stats(); len(st) != 1 || st[0].Jobs != 3 {
		t.Errorf("stats = %+v, want one zygote that ran the 3 jobs", st)
	}
}

// A zygote killed between jobs is replaced; the job in between runs with
// spawn.
func TestPoolReplacesDeadZygote(t *testing.T) {
	t.Parallel()
	pool, _, s := poolSetup(t, PoolConfig{})
	z := poolZygote(t, pool, s)
	old := z.Info().PID
	if err := unix.Kill(old, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	out, err := pool.Run(context.Background(), s) // the death may not be noticed yet
	if err != nil || string(out.Stdout) == "" {
		t.Fatalf("Run after the kill = %v, %q %q", err, out.Stdout, out.Stderr)
	}
	<-z.Done()
	if err := pool.Warm(context.Background(), s); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if pid := poolZygote(t, pool, s).Info().PID; pid == old {
		t.Fatal("the dead zygote was not replaced")
	}
	out, err = pool.Run(context.Background(), s)
	if err != nil || string(out.Stdout) != "True\n" {
		t.Fatalf("Run on the new zygote = %v, %q %q", err, out.Stdout, out.Stderr)
	}
}

// A zygote that dies while a job runs takes the job with it, and says so.
func TestZygoteDiesMidJob(t *testing.T) {
	t.Parallel()
	z := startZygote(t, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil)})
	b := setup(t)
	s := b.spec(t, fmt.Sprintf("import os, signal, time\nprint('started', flush=True)\nos.kill(%d, signal.SIGKILL)\ntime.sleep(60)\n", z.Info().PID))
	out, err := z.Run(context.Background(), s)
	if !errors.Is(err, ErrZygoteDied) {
		t.Fatalf("Run = %v, want ErrZygoteDied", err)
	}
	if out.Signal != "killed" || !strings.HasPrefix(string(out.Stdout), "started") {
		t.Errorf("outcome %+v", out)
	}
	if _, err := z.Run(context.Background(), s); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Run on a dead zygote = %v, want ErrNotStarted", err)
	}
}

func TestPoolStopsIdleZygotes(t *testing.T) {
	t.Parallel()
	pool := startPool(t, PoolConfig{Preload: testPreload, IdleTimeout: 100 * time.Millisecond})
	b := setup(t)
	s := b.spec(t, "print(1)\n")
	if err := pool.Warm(context.Background(), s); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	pool.mu.Lock()
	var z *Zygote
	for _, e := range pool.entries {
		z = e.z
	}
	pool.mu.Unlock()
	if z != nil {
		<-z.Done() // stopped by the janitor, not by the test's cleanup
	}
	if st := pool.stats(); len(st) != 0 {
		t.Errorf("stats = %+v after the idle stop", st)
	}
	// The next job starts a new one.
	if err := pool.Warm(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestPoolCapsZygotes(t *testing.T) {
	t.Parallel()
	pool, b, s := poolSetup(t, PoolConfig{MaxZygotes: 1})
	first := poolZygote(t, pool, s)
	other := s
	other.Preload = []string{"json", "decimal"}
	if err := pool.Warm(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	<-first.Done() // the least recently used one made room
	if st := pool.stats(); len(st) != 1 || st[0].State != "ready" || len(st[0].Preloaded) != 2 {
		t.Errorf("stats = %+v", st)
	}
	out, err := pool.Run(context.Background(), b.spec(t, "import sys\nprint('decimal' in sys.modules)\n"))
	if err != nil || string(out.Stdout) != "False\n" {
		// The first key's zygote is gone and the cap is reached by the
		// second, which is idle: it makes room again, and this job spawns.
		t.Errorf("Run = %v, %q %q", err, out.Stdout, out.Stderr)
	}
}

func BenchmarkZygotePrint1(b *testing.B) {
	tb := setup(b)
	z := startZygote(b, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: DefaultPreload})
	s := tb.spec(b, "print(1)\n")
	ctx := context.Background()
	for b.Loop() {
		out, err := z.Run(ctx, s)
		if err != nil || out.ExitCode != 0 || string(out.Stdout) != "1\n" {
			b.Fatalf("Run: %+v, %v", out, err)
		}
	}
}
