//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var serial atomic.Int64

// uniqueName keeps parallel tests, and test runs sharing a cgroup, apart.
func uniqueName(prefix string) string {
	return fmt.Sprintf("t%d-%s%d", os.Getpid(), prefix, serial.Add(1))
}

// unusable skips the test, but fails it under CI, where a missing
// capability must not pass unnoticed.
func unusable(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

func newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := Detect(uniqueName("m"))
	if err != nil {
		unusable(t, "cgroups not usable here: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return m
}

func newGroup(t *testing.T, m *Manager, l Limits) *Group {
	t.Helper()
	g, err := m.New(uniqueName("g"), l)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := g.Remove(); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	return g
}

func python(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		unusable(t, "no python3: %v", err)
	}
	return p
}

// startIn starts argv in g before it runs: a shell waits for a line on
// stdin while the test moves it into g, then execs argv.
func startIn(t *testing.T, g *Group, argv ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `read _ && exec "$@"`, "sh"}, argv...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Processes the job leaves behind hold its output pipe: a Wait at
	// cleanup, after a failed check, must not wait for them for ever.
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	return cmd, &out
}

func signalOf(cmd *exec.Cmd) syscall.Signal {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return ws.Signal()
	}
	return 0
}

// waitProcs waits until g holds n processes and returns them.
func waitProcs(t *testing.T, g *Group, n int) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := g.l.procs()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("group holds %v, want %d processes", pids, n)
		}
		time.Sleep(10 * time.Millisecond) // cgroup.procs cannot be waited on
	}
}

func assertEmpty(t *testing.T, g *Group) {
	t.Helper()
	if pids, err := g.l.procs(); err != nil || len(pids) != 0 {
		t.Fatalf("group holds %v (%v), want none", pids, err)
	}
}

// dead says whether pid has exited: gone, or a zombie its parent has not
// reaped yet.
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return strings.HasPrefix(after, "Z") || strings.HasPrefix(after, "X")
}

func assertGone(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there (%v)", d, err)
		}
	}
}

func TestMemoryLimitKillsJob(t *testing.T) {
	t.Parallel()
	py := python(t)
	m := newManager(t)
	const limit = 64 << 20
	g := newGroup(t, m, Limits{MemoryBytes: limit})
	// b"x" * n writes every byte, so each MiB is really charged.
	cmd, out := startIn(t, g, py, "-c", "chunks = []\nfor _ in range(200):\n    chunks.append(b'x' * (1 << 20))\nprint('survived')")
	err := cmd.Wait()
	if sig := signalOf(cmd); sig != syscall.SIGKILL {
		t.Fatalf("job ended with %v, output %q; want SIGKILL", err, out)
	}
	u := g.Usage()
	t.Logf("v%d usage %+v", m.Version(), u)
	if u.OOMKills < 1 {
		t.Errorf("OOMKills = %d, want >= 1", u.OOMKills)
	}
	if u.MemoryPeak > limit {
		t.Errorf("MemoryPeak = %d, above the limit %d", u.MemoryPeak, limit)
	}
	if u.MemoryPeak < limit/2 && !(m.Version() == 2 && u.MemoryPeak == 0) {
		t.Errorf("MemoryPeak = %d, want about the limit %d", u.MemoryPeak, limit)
	}
}

func TestPidsLimitStopsBombs(t *testing.T) {
	t.Parallel()
	const limit = 20
	bombs := map[string]struct{ script, want string }{
		// Children close their output so that Wait does not wait for them.
		"fork": {`
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            os.close(1); os.close(2)
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as e:
    print("refused", n, "errno", e.errno)
else:
    print("unbounded", n)
`, "errno 11"},
		"thread": {`
import threading, time
n = 0
try:
    while n < 1000:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        n += 1
except RuntimeError as e:
    print("refused", n, e)
else:
    print("unbounded", n)
`, "can't start new thread"},
	}
	for name, bomb := range bombs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			py := python(t)
			m := newManager(t)
			g := newGroup(t, m, Limits{Pids: limit})
			cmd, out := startIn(t, g, py, "-c", bomb.script)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("bomb: %v, output %q", err, out)
			}
			t.Logf("v%d: %s", m.Version(), bytes.TrimSpace(out.Bytes()))
			var n int
			if _, err := fmt.Sscanf(out.String(), "refused %d", &n); err != nil || n >= limit || !strings.Contains(out.String(), bomb.want) {
				t.Fatalf("output %q: want refused after fewer than %d, with %q", out, limit, bomb.want)
			}
			if u := g.Usage(); u.PidsMaxHits < 1 {
				t.Errorf("PidsMaxHits = %d, want >= 1 (usage %+v)", u.PidsMaxHits, u)
			}
			if err := g.Kill(); err != nil {
				t.Fatalf("Kill: %v", err)
			}
			assertEmpty(t, g)
			// The host can still start processes.
			if err := exec.Command("/bin/true").Run(); err != nil {
				t.Fatalf("host fork after the bomb: %v", err)
			}
		})
	}
}

// TestKill kills a job that left background processes behind, one of them
// in a session of its own and one orphaned: none of that leaves the group.
func TestKill(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{Pids: 50})
	killAll(t, g)
}

func killAll(t *testing.T, g *Group) {
	t.Helper()
	cmd, _ := startIn(t, g, "/bin/sh", "-c",
		`sleep 1000 & setsid sleep 1000 & (sleep 1000 &); sh -c 'sleep 1000 & exec sleep 1000' & exec sleep 1000`)
	pids := waitProcs(t, g, 6)
	// setsid(1) may still be about to call setsid(2) when the six are
	// counted: poll (the deadline only guards against a hang).
	leads := func(pid int) bool { sid, _ := unix.Getsid(pid); return sid == pid }
	for guard := time.Now().Add(10 * time.Second); !slices.ContainsFunc(pids, leads); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("no process in %v leads its own session", pids)
		}
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	assertEmpty(t, g)
	for _, pid := range pids {
		if !dead(pid) {
			t.Errorf("process %d survived Kill", pid)
		}
	}
	_ = cmd.Wait()
	if sig := signalOf(cmd); sig != syscall.SIGKILL {
		t.Errorf("job ended by %v, want SIGKILL", sig)
	}
}

// TestKillWhileForking kills a job that keeps forking as fast as it can
// up to its pids limit.
func TestKillWhileForking(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{Pids: 64})
	startIn(t, g, "/bin/sh", "-c", `while :; do sh -c 'sleep 1000 & sleep 1000' & done 2>/dev/null`)
	deadline := time.Now().Add(10 * time.Second)
	for g.Usage().PidsMaxHits == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the job never reached its pids limit")
		}
		time.Sleep(10 * time.Millisecond) // no notification for pids.events on v1
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	assertEmpty(t, g)
}

// TestSelfJoin joins a group from inside the process, as a sandboxed job
// does, also from a pid namespace of its own where its pid means nothing
// to the cgroup files.
func TestSelfJoin(t *testing.T) {
	t.Parallel()
	for _, newPidNS := range []bool{false, true} {
		t.Run(fmt.Sprintf("newpidns=%v", newPidNS), func(t *testing.T) {
			t.Parallel()
			m := newManager(t)
			g := newGroup(t, m, Limits{MemoryBytes: 64 << 20, Pids: 10})
			script := `for f in "$@"; do echo 0 > "$f" || exit 1; done; echo joined $$; exec sleep 1000`
			cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, g.ProcsFiles()...)...)
			if newPidNS {
				cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				if newPidNS {
					unusable(t, "no pid namespace: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "joined") {
				t.Fatalf("read %q, %v; want joined", line, err)
			}
			if inside := strings.TrimSpace(strings.TrimPrefix(line, "joined")); newPidNS && inside != "1" {
				t.Fatalf("pid inside the namespace is %s, want 1", inside)
			}
			for _, f := range g.ProcsFiles() {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(cmd.Process.Pid)) {
					t.Errorf("%s holds %q, not %d", f, b, cmd.Process.Pid)
				}
			}
		})
	}
}

func TestRemoveAndClose(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{Pids: 10})
	cmd, _ := startIn(t, g, "sleep", "1000")
	waitProcs(t, g, 1)
	for i := range 2 {
		if err := g.Remove(); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill after Remove: %v", err)
	}
	_ = g.Usage()
	assertGone(t, g.l.dirs()...)
	_ = cmd.Wait()

	// Close removes what the caller left behind, processes and all.
	left, err := m.New("left", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	cmd, _ = startIn(t, left, "sleep", "1000")
	waitProcs(t, left, 1)
	for i := range 2 {
		if err := m.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	assertGone(t, m.Dirs()...)
	_ = cmd.Wait()
	if sig := signalOf(cmd); sig != syscall.SIGKILL {
		t.Errorf("left-behind process ended by %v, want SIGKILL", sig)
	}
	if _, err := m.New("late", Limits{}); err == nil {
		t.Error("New after Close succeeded")
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", ".", "..", "a/b", "../x", "a b", strings.Repeat("x", 65), "é"} {
		if _, err := Detect(bad); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("Detect(%q) = %v, want an invalid-name error", bad, err)
		}
	}
	m := newManager(t)
	if _, err := m.New("..", Limits{}); err == nil {
		t.Error(`New("..") succeeded`)
	}
	if _, err := m.New("ok", Limits{Pids: -1}); err == nil {
		t.Error("New with a negative limit succeeded")
	}
	// A job id in use is refused, and its group left alone.
	g := newGroup(t, m, Limits{})
	job := filepath.Base(g.l.mem)
	startIn(t, g, "sleep", "1000")
	waitProcs(t, g, 1)
	if _, err := m.New(job, Limits{}); !errors.Is(err, fs.ErrExist) {
		t.Errorf("New of a job in use = %v, want ErrExist", err)
	}
	waitProcs(t, g, 1)
}

// TestConcurrent creates and removes groups in parallel, in one manager and
// across managers that share codexec/.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		wg.Go(func() {
			g, err := m.New(fmt.Sprintf("job-%d", i), Limits{MemoryBytes: 32 << 20, Pids: 8})
			if err != nil {
				errs <- err
				return
			}
			cmd := exec.Command("sleep", "1000")
			if err := cmd.Start(); err != nil {
				errs <- err
			} else if err := g.Add(cmd.Process.Pid); err != nil {
				errs <- err
				_ = cmd.Process.Kill()
			}
			_ = g.Usage()
			if err := g.Remove(); err != nil {
				errs <- err
			}
			if cmd.Process != nil {
				_ = cmd.Wait()
			}
		})
	}
	for range 8 {
		wg.Go(func() {
			m, err := Detect(uniqueName("c"))
			if err != nil {
				errs <- err
				return
			}
			if _, err := m.New("x", Limits{Pids: 4}); err != nil {
				errs <- err
			}
			if err := m.Close(); err != nil {
				errs <- err
			}
			for _, d := range m.Dirs() {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					errs <- fmt.Errorf("%s left behind (%v)", d, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, d := range m.Dirs() {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() {
				t.Errorf("group %s left in %s", e.Name(), d)
			}
		}
	}
}

// TestV2WithoutControllers runs the v2 paths that need no controller
// (layout, cgroup.kill, removal) on a cgroup2 hierarchy, which hybrid
// hosts mount without controllers next to v1.
func TestV2WithoutControllers(t *testing.T) {
	t.Parallel()
	mounts, members, err := readSelf()
	if err != nil {
		t.Fatal(err)
	}
	own, ok := ownDir(mounts, members, "")
	if !ok {
		t.Skip("no cgroup2 mount shows this process's cgroup")
	}
	if filepath.Base(own) == workerLeaf {
		own = filepath.Dir(own)
	}
	l, err := setupV2(own, uniqueName("v2"), nil)
	if err != nil {
		unusable(t, "cgroup v2 at %s not usable: %v", own, err)
	}
	m := &Manager{l}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		assertGone(t, m.Dirs()...)
	})
	g := newGroup(t, m, Limits{})
	if _, err := os.Stat(filepath.Join(g.l.mem, "cgroup.kill")); err != nil {
		t.Logf("no cgroup.kill (%v): Kill signals one by one", err)
	}
	killAll(t, g)
}

// A group reused for another job gets that job's limits, lifted ones
// included, and its counters compared from the job's start.
func TestResetForAnotherJob(t *testing.T) {
	t.Parallel()
	py := python(t)
	m := newManager(t)
	g := newGroup(t, m, Limits{MemoryBytes: 64 << 20, Pids: 8})
	cmd, out := startIn(t, g, py, "-c", "chunks = []\nfor _ in range(200):\n    chunks.append(b'x' * (1 << 20))")
	_ = cmd.Wait()
	if sig := signalOf(cmd); sig != syscall.SIGKILL {
		t.Fatalf("first job ended with %v (%q), want the OOM kill", sig, out)
	}
	base := g.Usage()
	if base.OOMKills < 1 {
		t.Fatalf("first job: %+v", base)
	}
	// The next job may use 256 MiB and any number of processes.
	if _, err := g.Reset(Limits{MemoryBytes: 256 << 20}); err != nil {
		t.Fatal(err)
	}
	cmd, out = startIn(t, g, py, "-c", "import os\nchunks = [b'x' * (1 << 20) for _ in range(128)]\npids = [os.fork() for _ in range(3)]\nprint('fine')")
	if err := cmd.Wait(); err != nil || !bytes.Contains(out.Bytes(), []byte("fine")) {
		t.Fatalf("second job: %v %q", err, out)
	}
	if u := g.Usage().Sub(base); u.OOMKills != 0 || u.PidsMaxHits != 0 {
		t.Fatalf("second job's own counters %+v, want none", u)
	}
	// And back to a tight limit.
	if _, err := g.Reset(Limits{MemoryBytes: 32 << 20, Pids: 4}); err != nil {
		t.Fatal(err)
	}
	base = g.Usage()
	cmd, out = startIn(t, g, py, "-c", "chunks = []\nfor _ in range(200):\n    chunks.append(b'x' * (1 << 20))")
	_ = cmd.Wait()
	if sig := signalOf(cmd); sig != syscall.SIGKILL || g.Usage().Sub(base).OOMKills < 1 {
		t.Fatalf("third job ended with %v (%q), usage %+v", sig, out, g.Usage().Sub(base))
	}
}

// Where the cpu controller is available, a job's process joins a cpu group
// of its own with the default weight, so that busy jobs split the CPUs
// evenly however many threads each runs.
func TestJobsGetEqualCPUWeight(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	if !m.CPU() {
		unusable(t, "no cpu controller for the worker's cgroup (cgroup v%d)", m.Version())
	}
	g := newGroup(t, m, Limits{})
	file, want := "cpu.shares", cpuSharesV1
	if m.Version() == 2 {
		file, want = "cpu.weight", cpuWeightV2
	}
	if got := readInt(g.l.cpu, file); strconv.FormatInt(got, 10) != want {
		t.Errorf("%s = %d, want %s", file, got, want)
	}
	cmd, _ := startIn(t, g, "/bin/sleep", "30")
	waitProcs(t, g, 1)
	b, err := os.ReadFile(filepath.Join(g.l.cpu, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(b)), strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("process %d not in its cpu group %s (%q)", cmd.Process.Pid, g.l.cpu, b)
	}
}

// Charged is never less than what Held or Kernel count: the worker reads
// it first after each job and skips those two (memory.stat) when it is
// within the bound, which is only sound if it includes both. A process
// holds anonymous memory, a /dev/shm file (shmem) and thousands of inodes
// (kernel memory) while the three are read.
func TestChargedBoundsHeldAndKernel(t *testing.T) {
	m := newManager(t)
	g := newGroup(t, m, Limits{})
	dir := t.TempDir()
	shm, err := os.MkdirTemp("/dev/shm", "charged")
	if err != nil {
		unusable(t, "no /dev/shm: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shm) })
	script := `import os, sys, time
anon = bytearray(16 << 20)
for i in range(0, len(anon), 4096):
    anon[i] = 1
with open(sys.argv[1] + '/big', 'wb') as f:
    f.write(b'x' * (4 << 20))
for i in range(5000):
    open('%s/f%d' % (sys.argv[1], i), 'w').close()
open(sys.argv[2] + '/ready', 'w').close()
time.sleep(60)
`
	cmd, out := startIn(t, g, python(t), "-c", script, shm, dir)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process did not get ready: %s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	charged, ok := g.Charged()
	if !ok {
		t.Fatal("Charged: no reading")
	}
	held, kernel := g.Held(), g.Kernel()
	if held < 20<<20 {
		t.Errorf("Held = %d, want at least the 16 MiB of anonymous memory and the 4 MiB file", held)
	}
	if kernel <= 0 {
		t.Errorf("Kernel = %d, want the inodes of 5,000 files", kernel)
	}
	if charged < held || charged < kernel {
		t.Errorf("Charged = %d, less than Held (%d) or Kernel (%d)", charged, held, kernel)
	}
	_ = cmd.Process.Kill()
}
