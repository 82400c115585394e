//go:build linux

package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// executors are the ways of running a job that must give the same Outcome
// under the same limits: each test below runs against every one of them.
var executors = []struct {
	name string
	get  func(tb testing.TB) Executor
}{
	{"spawn", func(testing.TB) Executor { return Spawn{} }},
	{"zygote", func(tb testing.TB) Executor { return zygote(tb) }},
}

// forEachExecutor runs fn as a parallel subtest for every executor.
func forEachExecutor(t *testing.T, fn func(t *testing.T, ex Executor)) {
	t.Helper()
	for _, e := range executors {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			fn(t, e.get(t))
		})
	}
}

// runWith runs s with ex and fails the test if it could not be run.
func runWith(tb testing.TB, ex Executor, s Spec) Outcome {
	tb.Helper()
	out, err := ex.Run(context.Background(), s)
	if err != nil {
		tb.Fatalf("%T.Run: %v", ex, err)
	}
	return out
}

func TestExitStatus(t *testing.T) {
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
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				out := runWith(t, ex, b.spec(t, tt.src))
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
	})
}

func TestTracebackNamesScriptAndLine(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		b := setup(t)
		s := b.spec(t, "print('before')\nx = 1\nraise ValueError('bad value')\n")
		out := runWith(t, ex, s)
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
	})
}

// On timeout the whole process group is killed, even a main process that
// ignores SIGTERM, and what it printed before is kept.
func TestTimeout(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		src     string
		timeout time.Duration
		stdout  string // what must be kept; "" means a child's pid, which must exit
	}{
		{name: "busy loop", timeout: 3 * time.Second, stdout: "started\n", src: `
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('started', flush=True)
while True:
    pass
`},
		{name: "group killed", timeout: 2 * time.Second, src: `
import signal, subprocess
signal.signal(signal.SIGTERM, signal.SIG_IGN)
p = subprocess.Popen(['sleep', '100'])
print(p.pid, flush=True)
while True:
    pass
`},
	}
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				s := b.spec(t, tt.src)
				s.Timeout = tt.timeout
				out := runWith(t, ex, s)
				if !out.TimedOut || out.ExitCode != -1 || out.Signal != "killed" {
					t.Fatalf("TimedOut %v, exit code %d, signal %q; want true, -1, killed", out.TimedOut, out.ExitCode, out.Signal)
				}
				if out.Duration < s.Timeout {
					t.Errorf("Duration %v is shorter than the timeout %v", out.Duration, s.Timeout)
				}
				if tt.stdout != "" {
					if string(out.Stdout) != tt.stdout {
						t.Errorf("stdout = %q; output before the timeout must be kept", out.Stdout)
					}
					return
				}
				assertExits(t, childPID(t, out))
			})
		}
	})
}

// A job's background processes die with it, and the run does not wait for
// them.
func TestKillsBackgroundProcesses(t *testing.T) {
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
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				s := b.spec(t, tt.src)
				if tt.timeout > 0 {
					s.Timeout = tt.timeout
				}
				began := time.Now()
				out := runWith(t, ex, s)
				// Time spent after the main process exited: killing the group
				// must close the pipes, not the pipeDrainDelay backstop.
				if drain := time.Since(began) - out.Duration; drain >= pipeDrainDelay {
					t.Errorf("Run returned %v after the process exited; the group was not killed", drain)
				}
				if out.TimedOut != (tt.timeout > 0) {
					t.Errorf("TimedOut = %v", out.TimedOut)
				}
				assertExits(t, childPID(t, out))
			})
		}
	})
}

// A process that leaves the group (setsid) cannot be killed with it; the
// WaitDelay backstop keeps it from holding the run hostage through the
// pipes.
func TestEscapedProcessDoesNotHang(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		b := setup(t)
		s := b.spec(t, "import subprocess\np = subprocess.Popen(['sleep', '60'], start_new_session=True)\nprint(p.pid)\n")
		began := time.Now()
		out := runWith(t, ex, s)
		pid := childPID(t, out)
		t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
		if out.ExitCode != 0 {
			t.Errorf("exit code %d, want 0", out.ExitCode)
		}
		if elapsed := time.Since(began); elapsed > out.Duration+pipeDrainDelay+10*time.Second {
			t.Errorf("Run took %v after a %v run", elapsed, out.Duration)
		}
	})
}

// childPID is the pid of the child process a job printed as its output.
func childPID(t *testing.T, out Outcome) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(string(out.Stdout)))
	if err != nil {
		t.Fatalf("no child pid in stdout %q (stderr %q)", out.Stdout, out.Stderr)
	}
	return pid
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

func TestOutputLimit(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		b := setup(t)
		// 50 MiB to stdout and 3 MiB to stderr, in chunks, both starting
		// with a recognisable prefix and ending with a line of their own.
		s := b.spec(t, `
import sys
chunk = b'0123456789abcdef' * 4096
for _ in range(50 * 16):
    sys.stdout.buffer.write(chunk)
sys.stdout.write('the end of stdout\n')
sys.stdout.flush()
for _ in range(3 * 16):
    sys.stderr.buffer.write(chunk[::-1])
sys.stderr.write('ValueError: the end of stderr\n')
`)
		s.OutputLimit = 1000
		spilled := map[string]*hashWriter{}
		var mu sync.Mutex // the two streams spill from goroutines of their own
		s.Spill = func(stream string) io.Writer {
			mu.Lock()
			defer mu.Unlock()
			spilled[stream] = &hashWriter{h: sha256.New()}
			return spilled[stream]
		}
		out := runWith(t, ex, s)
		if out.ExitCode != 0 {
			t.Fatalf("exit code %d, stderr %q", out.ExitCode, out.Stderr)
		}
		pattern := strings.Repeat("0123456789abcdef", 100)
		reversed := strings.Repeat("fedcba9876543210", 100)
		checkHeadTail(t, "stdout", out.Stdout, out.StdoutCut, out.StdoutTruncated, out.StdoutBytes, pattern[:500], "the end of stdout\n", 50<<20+18)
		checkHeadTail(t, "stderr", out.Stderr, out.StderrCut, out.StderrTruncated, out.StderrBytes, reversed[:500], "ValueError: the end of stderr\n", 3<<20+30)
		for stream, want := range map[string]int64{"stdout": out.StdoutBytes, "stderr": out.StderrBytes} {
			got := spilled[stream]
			if got == nil {
				t.Errorf("%s: never spilled", stream)
				continue
			}
			if got.n != want {
				t.Errorf("%s: %d bytes spilled, want all %d", stream, got.n, want)
			}
		}
		if out.StdoutSpilled != out.StdoutBytes || out.StderrSpilled != out.StderrBytes {
			t.Errorf("spilled counted %d and %d, want %d and %d", out.StdoutSpilled, out.StderrSpilled, out.StdoutBytes, out.StderrBytes)
		}
		wantSum := sha256.New()
		chunk := []byte(strings.Repeat("0123456789abcdef", 4096))
		for range 50 * 16 {
			wantSum.Write(chunk)
		}
		wantSum.Write([]byte("the end of stdout\n"))
		if got := spilled["stdout"]; got != nil && !bytes.Equal(got.h.Sum(nil), wantSum.Sum(nil)) {
			t.Errorf("stdout spilled is not the stream byte for byte")
		}
	})
}

// checkHeadTail checks a stream cut to 1000 bytes: its first 500, its last
// 500, the cut between them.
func checkHeadTail(t *testing.T, stream string, kept []byte, cut int, truncated bool, total int64, head, end string, wantTotal int64) {
	t.Helper()
	if len(kept) != 1000 || cut != 500 || !truncated || total != wantTotal {
		t.Errorf("%s: kept %d bytes cut at %d, truncated %v, counted %d; want 1000, 500, true, %d", stream, len(kept), cut, truncated, total, wantTotal)
		return
	}
	if string(kept[:cut]) != head {
		t.Errorf("%s: first 500 bytes %q, want the stream's first", stream, kept[:40])
	}
	if !strings.HasSuffix(string(kept), end) {
		t.Errorf("%s: kept bytes end %q, want the stream's last line %q", stream, kept[len(kept)-40:], end)
	}
}

type hashWriter struct {
	h hash.Hash
	n int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return w.h.Write(p)
}

func TestOutputLimitPerStream(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		b := setup(t)
		// Only stderr overflows; stdout, under the limit, is kept whole.
		s := b.spec(t, "import sys\nprint('x' * 99)\nsys.stderr.write('e' * 5000)\n")
		s.OutputLimit = 100
		out := runWith(t, ex, s)
		if len(out.Stdout) != 100 || out.StdoutTruncated || out.StdoutBytes != 100 {
			t.Errorf("stdout: %d bytes, truncated %v, counted %d; want 100, false, 100", len(out.Stdout), out.StdoutTruncated, out.StdoutBytes)
		}
		if len(out.Stderr) != 100 || !out.StderrTruncated || out.StderrBytes != 5000 {
			t.Errorf("stderr: %d bytes, truncated %v, counted %d; want 100, true, 5000", len(out.Stderr), out.StderrTruncated, out.StderrBytes)
		}
	})
}

func TestDefaultOutputLimit(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		b := setup(t)
		out := runWith(t, ex, b.spec(t, "import sys\nsys.stdout.write('y' * (1024 * 1024 + 10))\n"))
		if len(out.Stdout) != DefaultOutputLimit || !out.StdoutTruncated || out.StdoutBytes != DefaultOutputLimit+10 || out.StdoutCut != DefaultOutputLimit/2 {
			t.Errorf("stdout: %d bytes, truncated %v, counted %d", len(out.Stdout), out.StdoutTruncated, out.StdoutBytes)
		}
	})
}

func TestContextCancel(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
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
		out, err := ex.Run(ctx, s)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		if out.TimedOut || out.ExitCode != -1 || out.Signal != "killed" {
			t.Errorf("TimedOut %v, exit code %d, signal %q; want false, -1, killed", out.TimedOut, out.ExitCode, out.Signal)
		}
	})
}

// Limits apply to the job whichever way it starts. RLIMIT_CORE is 1 (no
// core file, and no core_pattern pipe program started as root for a crash).
func TestRlimits(t *testing.T) {
	t.Parallel()
	forEachExecutor(t, func(t *testing.T, ex Executor) {
		b := setup(t)
		s := b.spec(t, "import resource\nprint(resource.getrlimit(resource.RLIMIT_FSIZE), resource.getrlimit(resource.RLIMIT_CORE)[1])\n"+
			"with open('big', 'w') as f:\n    f.write('x' * 5000)\n")
		s.Rlimits = append(NoCoreFiles(), Rlimit{Resource: unix.RLIMIT_FSIZE, Cur: 1000, Max: 2000})
		if out := runWith(t, ex, s); string(out.Stdout) != "(1000, 2000) 1\n" || out.ExitCode != 1 || !bytes.Contains(out.Stderr, []byte("File too large")) {
			t.Errorf("exit %d stdout %q stderr %q", out.ExitCode, out.Stdout, out.Stderr)
		}
		s.Rlimits = []Rlimit{{Resource: unix.RLIMIT_FSIZE, Cur: 2, Max: 1}}
		if _, err := ex.Run(context.Background(), s); err == nil {
			t.Error("a soft limit above the hard one was accepted")
		}
	})
}
