//go:build linux

package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// python is the real interpreter behind python3 on PATH. Shims (pyenv) are
// resolved once here so that every run does not pay for them.
var python = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return strings.TrimSpace(string(out)), nil
})

type testBundle struct {
	python string
	dir    string
}

func setup(tb testing.TB) *testBundle {
	tb.Helper()
	p, err := python()
	if err != nil {
		tb.Skipf("no python3 to run jobs with: %v", err)
	}
	return &testBundle{python: p, dir: tb.TempDir()}
}

// spec writes src as the job's script and returns a Spec that runs it with a
// minimal environment and a generous safety timeout.
func (b *testBundle) spec(tb testing.TB, src string) Spec {
	tb.Helper()
	script := filepath.Join(b.dir, "job.py")
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	return Spec{
		Python:  b.python,
		Script:  script,
		Dir:     b.dir,
		Env:     ChildEnv(nil, "", b.dir, nil, nil),
		Timeout: time.Minute,
	}
}

func run(tb testing.TB, s Spec) Outcome {
	tb.Helper()
	out, err := Run(context.Background(), s)
	if err != nil {
		tb.Fatalf("Run: %v", err)
	}
	return out
}

func TestRunExitStatus(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		src        string
		exitCode   int
		signal     string
		stdout     string
		stderrHas  string
		stderrNone bool
	}{
		{name: "ok", src: "print('hello')\n", stdout: "hello\n", stderrNone: true},
		{name: "sys.exit", src: "import sys\nprint('out')\nsys.exit(3)\n", exitCode: 3, stdout: "out\n", stderrNone: true},
		{name: "os._exit", src: "import os\nos._exit(7)\n", exitCode: 7, stderrNone: true},
		{name: "exception", src: "raise RuntimeError('boom')\n", exitCode: 1, stderrHas: "RuntimeError: boom"},
		{name: "input at EOF", src: "input('name? ')\n", exitCode: 1, stdout: "name? ", stderrHas: "EOFError"},
		{name: "stdin is empty", src: "import sys\nprint(repr(sys.stdin.read()))\n", stdout: "''\n"},
		{name: "self-kill", src: "import os\nprint('bye', flush=True)\nos.kill(os.getpid(), 9)\n", exitCode: -1, signal: "killed", stdout: "bye\n"},
		{name: "segfault", src: "import ctypes\nctypes.string_at(0)\n", exitCode: -1, signal: "segmentation fault"},
		{name: "stderr does not drop stdout", src: "import sys\nprint('result')\nprint('warning', file=sys.stderr)\n", stdout: "result\n", stderrHas: "warning"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			out := run(t, b.spec(t, tt.src))
			if out.ExitCode != tt.exitCode || out.Signal != tt.signal {
				t.Errorf("exit code %d, signal %q; want %d, %q (stderr: %s)", out.ExitCode, out.Signal, tt.exitCode, tt.signal, out.Stderr)
			}
			if got := string(out.Stdout); got != tt.stdout {
				t.Errorf("stdout = %q, want %q", got, tt.stdout)
			}
			if tt.stderrNone && len(out.Stderr) > 0 {
				t.Errorf("stderr = %q, want none", out.Stderr)
			}
			if !bytes.Contains(out.Stderr, []byte(tt.stderrHas)) {
				t.Errorf("stderr = %q, want it to contain %q", out.Stderr, tt.stderrHas)
			}
			if out.TimedOut || out.StdoutTruncated || out.StderrTruncated {
				t.Errorf("unexpected flags: %+v", out)
			}
			if out.StdoutBytes != int64(len(out.Stdout)) || out.StderrBytes != int64(len(out.Stderr)) {
				t.Errorf("byte counts %d/%d, kept %d/%d", out.StdoutBytes, out.StderrBytes, len(out.Stdout), len(out.Stderr))
			}
			if out.Duration <= 0 {
				t.Errorf("Duration = %v", out.Duration)
			}
		})
	}
}

func TestRunTracebackNamesScriptAndLine(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.spec(t, "print('before')\nx = 1\nraise ValueError('bad value')\n")
	out := run(t, s)
	if out.ExitCode != 1 {
		t.Fatalf("exit code %d, want 1", out.ExitCode)
	}
	if string(out.Stdout) != "before\n" {
		t.Errorf("stdout = %q, want %q", out.Stdout, "before\n")
	}
	want := fmt.Sprintf("File %q, line 3", s.Script)
	if !bytes.Contains(out.Stderr, []byte(want)) || !bytes.Contains(out.Stderr, []byte("ValueError: bad value")) {
		t.Errorf("traceback does not say %s / ValueError: bad value:\n%s", want, out.Stderr)
	}
}

func TestRunTimeoutKillsBusyLoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.spec(t, `
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('started', flush=True)
while True:
    pass
`)
	s.Timeout = 500 * time.Millisecond
	out := run(t, s)
	if !out.TimedOut || out.ExitCode != -1 || out.Signal != "killed" {
		t.Fatalf("TimedOut %v, exit code %d, signal %q; want true, -1, killed", out.TimedOut, out.ExitCode, out.Signal)
	}
	if out.Duration < s.Timeout {
		t.Errorf("Duration %v is shorter than the timeout %v", out.Duration, s.Timeout)
	}
	if string(out.Stdout) != "started\n" {
		t.Errorf("stdout = %q; output before the timeout must be kept", out.Stdout)
	}
}

// A job's background processes die with it, and Run does not wait for them.
func TestRunKillsBackgroundProcesses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		src     string
		timeout time.Duration
	}{
		{
			// The child inherits stdout and stderr: if it were not killed,
			// the pipes would stay open and Run would hang on them.
			name: "Popen holding the pipes",
			src: `
import subprocess
p = subprocess.Popen(['sleep', '100'])
print(p.pid)
`,
		},
		{
			// The child lets go of the pipes, so only the group kill can end it.
			name: "fork with closed pipes",
			src: `
import os, time
pid = os.fork()
if pid == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    time.sleep(100)
    os._exit(0)
print(pid)
`,
		},
		{
			name:    "Popen at timeout",
			timeout: 500 * time.Millisecond,
			src: `
import subprocess
p = subprocess.Popen(['sleep', '100'])
print(p.pid, flush=True)
while True:
    pass
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			s := b.spec(t, tt.src)
			if tt.timeout > 0 {
				s.Timeout = tt.timeout
			}
			began := time.Now()
			out := run(t, s)
			// Time spent after the main process exited: killing the group
			// must close the pipes, not the pipeDrainDelay backstop.
			if drain := time.Since(began) - out.Duration; drain >= pipeDrainDelay {
				t.Errorf("Run returned %v after the process exited; the group was not killed", drain)
			}
			if out.TimedOut != (tt.timeout > 0) {
				t.Errorf("TimedOut = %v", out.TimedOut)
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
			if err != nil {
				t.Fatalf("no child pid in stdout %q (stderr %q)", out.Stdout, out.Stderr)
			}
			assertExits(t, pid)
		})
	}
}

// A process that leaves the group (setsid) cannot be killed with it; the
// WaitDelay backstop keeps it from holding Run hostage through the pipes.
func TestRunEscapedProcessDoesNotHang(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.spec(t, `
import subprocess
p = subprocess.Popen(['sleep', '60'], start_new_session=True)
print(p.pid)
`)
	began := time.Now()
	out := run(t, s)
	pid, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
	if err != nil {
		t.Fatalf("no child pid in stdout %q (stderr %q)", out.Stdout, out.Stderr)
	}
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	if out.ExitCode != 0 {
		t.Errorf("exit code %d, want 0", out.ExitCode)
	}
	if elapsed := time.Since(began); elapsed > out.Duration+pipeDrainDelay+10*time.Second {
		t.Errorf("Run took %v after a %v run", elapsed, out.Duration)
	}
}

// assertExits fails the test unless process pid exits within a few seconds.
// It watches the process through a pidfd instead of sleeping and retrying.
func assertExits(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // already gone and reaped
	}
	if err != nil {
		t.Fatalf("pidfd_open(%d): %v", pid, err)
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(10 * time.Second)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(time.Until(deadline).Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("poll pidfd: %v", err)
		}
		if n == 0 {
			_ = unix.Kill(pid, unix.SIGKILL)
			t.Fatalf("background process %d outlived its job", pid)
		}
		return
	}
}

func TestRunOutputLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 50 MiB to stdout and 3 MiB to stderr, in chunks, both starting with a
	// recognisable prefix.
	s := b.spec(t, `
import sys
chunk = b'0123456789abcdef' * 4096
for _ in range(50 * 16):
    sys.stdout.buffer.write(chunk)
sys.stdout.flush()
for _ in range(3 * 16):
    sys.stderr.buffer.write(chunk[::-1])
`)
	s.OutputLimit = 1000
	out := run(t, s)
	if out.ExitCode != 0 {
		t.Fatalf("exit code %d, stderr %q", out.ExitCode, out.Stderr)
	}
	pattern := strings.Repeat("0123456789abcdef", 100)
	reversed := strings.Repeat("fedcba9876543210", 100)
	if got := string(out.Stdout); got != pattern[:1000] || !out.StdoutTruncated || out.StdoutBytes != 50<<20 {
		t.Errorf("stdout: kept %d bytes (prefix ok: %v), truncated %v, counted %d; want 1000, true, %d",
			len(got), got == pattern[:1000], out.StdoutTruncated, out.StdoutBytes, 50<<20)
	}
	if got := string(out.Stderr); got != reversed[:1000] || !out.StderrTruncated || out.StderrBytes != 3<<20 {
		t.Errorf("stderr: kept %d bytes (prefix ok: %v), truncated %v, counted %d; want 1000, true, %d",
			len(got), got == reversed[:1000], out.StderrTruncated, out.StderrBytes, 3<<20)
	}
}

func TestRunOutputLimitPerStream(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// Only stderr overflows; stdout, under the limit, is kept whole.
	s := b.spec(t, "import sys\nprint('x' * 99)\nsys.stderr.write('e' * 5000)\n")
	s.OutputLimit = 100
	out := run(t, s)
	if len(out.Stdout) != 100 || out.StdoutTruncated || out.StdoutBytes != 100 {
		t.Errorf("stdout: %d bytes, truncated %v, counted %d; want 100, false, 100", len(out.Stdout), out.StdoutTruncated, out.StdoutBytes)
	}
	if len(out.Stderr) != 100 || !out.StderrTruncated || out.StderrBytes != 5000 {
		t.Errorf("stderr: %d bytes, truncated %v, counted %d; want 100, true, 5000", len(out.Stderr), out.StderrTruncated, out.StderrBytes)
	}
}

func TestRunDefaultOutputLimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	out := run(t, b.spec(t, "import sys\nsys.stdout.write('y' * (1024 * 1024 + 10))\n"))
	if len(out.Stdout) != DefaultOutputLimit || !out.StdoutTruncated || out.StdoutBytes != DefaultOutputLimit+10 {
		t.Errorf("stdout: %d bytes, truncated %v, counted %d", len(out.Stdout), out.StdoutTruncated, out.StdoutBytes)
	}
}

func TestRunContextCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The script tells the test it is running through a FIFO, then spins.
	fifo := filepath.Join(b.dir, "ready")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	s := b.spec(t, fmt.Sprintf(`
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(%q, 'w') as f:
    f.write('ready')
while True:
    pass
`, fifo))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// Opening a FIFO for reading blocks until the script opens it.
		if data, err := os.ReadFile(fifo); err == nil && string(data) == "ready" {
			cancel()
		}
	}()
	out, err := Run(ctx, s)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if out.TimedOut || out.ExitCode != -1 || out.Signal != "killed" {
		t.Errorf("TimedOut %v, exit code %d, signal %q; want false, -1, killed", out.TimedOut, out.ExitCode, out.Signal)
	}
}

// The child sees exactly Spec.Env: nothing of the worker's own environment.
func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	t.Run("ChildEnv", func(t *testing.T) {
		t.Parallel()
		base := []string{
			"PATH=/worker/bin", "HOME=/root", "LANG=en_US.UTF-8",
			"NATS_URL=nats://secret@nats:4222", "CODEXEC_REDIS_URL=redis://:pw@redis:6379",
			"AWS_SECRET_ACCESS_KEY=hunter2", "HF_TOKEN=tok",
		}
		env := ChildEnv(base, "/opt/venv", "/home/job", []string{"HF_TOKEN"}, map[string]string{"MPLBACKEND": "Agg"})
		got := childEnviron(t, env)
		for _, name := range []string{"NATS_URL", "CODEXEC_REDIS_URL", "AWS_SECRET_ACCESS_KEY"} {
			if v, ok := got[name]; ok {
				t.Errorf("%s=%s leaked into the job", name, v)
			}
		}
		want := map[string]string{
			"PATH": "/opt/venv/bin:" + SystemPath, "HOME": "/home/job", "VIRTUAL_ENV": "/opt/venv",
			"LANG": "en_US.UTF-8", "PYTHONIOENCODING": "utf-8", "HF_TOKEN": "tok", "MPLBACKEND": "Agg",
		}
		for name, v := range want {
			if got[name] != v {
				t.Errorf("%s = %q, want %q", name, got[name], v)
			}
		}
	})
	t.Run("nil", func(t *testing.T) {
		t.Parallel()
		got := childEnviron(t, nil)
		// Python may set LC_CTYPE itself (PEP 538); nothing else may appear.
		delete(got, "LC_CTYPE")
		if len(got) != 0 {
			t.Errorf("a nil Spec.Env gave the child %v; want an empty environment", got)
		}
	})
}

// childEnviron runs a job with environment env and returns the environment
// the job saw.
func childEnviron(t *testing.T, env []string) map[string]string {
	t.Helper()
	b := setup(t)
	s := b.spec(t, "import json, os\nprint(json.dumps(dict(os.environ)))\n")
	s.Env = env
	out := run(t, s)
	var got map[string]string
	if err := json.Unmarshal(out.Stdout, &got); err != nil {
		t.Fatalf("child printed %q (stderr %q): %v", out.Stdout, out.Stderr, err)
	}
	return got
}

func TestRunStartErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.spec(t, "print(1)\n")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name  string
		ctx   context.Context
		spec  func(s *Spec)
		isErr error
	}{
		{name: "missing interpreter", spec: func(s *Spec) { s.Python = filepath.Join(b.dir, "no-such-python") }, isErr: os.ErrNotExist},
		{name: "relative interpreter", spec: func(s *Spec) { s.Python = "python3" }},
		{name: "empty interpreter", spec: func(s *Spec) { s.Python = "" }},
		{name: "relative script", spec: func(s *Spec) { s.Script = "job.py" }},
		{name: "missing dir", spec: func(s *Spec) { s.Dir = filepath.Join(b.dir, "gone") }},
		{name: "cancelled context", ctx: cancelled, spec: func(*Spec) {}, isErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := good
			tt.spec(&s)
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			out, err := Run(ctx, s)
			if err == nil {
				t.Fatalf("Run started %+v: %+v", s, out)
			}
			if tt.isErr != nil && !errors.Is(err, tt.isErr) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.isErr)
			}
		})
	}
}

func BenchmarkRunPrint1(b *testing.B) {
	tb := setup(b)
	s := tb.spec(b, "print(1)\n")
	ctx := context.Background()
	for b.Loop() {
		out, err := Run(ctx, s)
		if err != nil || out.ExitCode != 0 || string(out.Stdout) != "1\n" {
			b.Fatalf("Run: %+v, %v", out, err)
		}
	}
}
