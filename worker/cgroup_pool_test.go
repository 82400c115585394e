package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/worker/cgroup"
	"golang.org/x/sys/unix"
)

var poolSerial atomic.Int64

// newCgroupPool is a pool of job groups under a manager of the test's own.
func newCgroupPool(t *testing.T) *cgroupPool {
	t.Helper()
	m, err := cgroup.Detect(fmt.Sprintf("t%d-pool%d", os.Getpid(), poolSerial.Add(1)))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cgroups not usable here: %v", err)
		}
		t.Skipf("cgroups not usable here: %v", err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &cgroupPool{m: m, max: 2, keepLimits: true}
}

// runInGroup runs python code in g (a shell joins g, then becomes python)
// and returns how it ended.
func runInGroup(t *testing.T, g *cgroup.Group, code string) *os.ProcessState {
	t.Helper()
	st, _ := runInGroupOutput(t, g, code)
	return st
}

// runInGroupOutput is runInGroup, with what the process wrote on stderr.
func runInGroupOutput(t *testing.T, g *cgroup.Group, code string) (*os.ProcessState, string) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	join := ""
	for _, f := range g.ProcsFiles() {
		join += "echo 0 > " + strconv.Quote(f) + " && "
	}
	cmd := exec.Command("/bin/sh", "-c", join+`exec "$@"`, "sh", py, "-c", code)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	_ = cmd.Run()
	return cmd.ProcessState, stderr.String()
}

// A reused group's counters are read when it goes back to the pool, and
// its next job's usage is counted from them: an OOM kill of one job is
// not the next job's, and the next job's own is counted. Each job gets its
// own limits, whether they are written again or kept from the last job.
func TestCgroupPoolCountsEachJobFromItsStart(t *testing.T) {
	t.Parallel()
	p := newCgroupPool(t)
	hog := "chunks = []\nfor _ in range(200):\n    chunks.append(b'x' * (1 << 20))"
	tight := cgroup.Limits{MemoryBytes: 48 << 20, Pids: 8}

	g, base, err := p.get(tight)
	if err != nil {
		t.Fatal(err)
	}
	first := &jobLimits{group: g, base: base}
	// The hog is killed by the OOM killer; once in a CI run on a loaded
	// machine it ended with exit status 1 instead, in 40 ms (what it said
	// went unseen): it runs again then, in the same job, up to twice.
	for try := 1; ; try++ {
		st, stderr := runInGroupOutput(t, g, hog)
		if st.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL {
			break
		}
		if try == 3 {
			t.Fatalf("first job ended %v three times, want the OOM kill; stderr:\n%s", st, stderr)
		}
		t.Logf("try %d of the first job ended %v, not by the OOM kill; stderr:\n%s", try, st, stderr)
	}
	if u := first.usage(); u.OOMKills < 1 {
		t.Fatalf("first job's usage %+v, want its OOM kill", u)
	}
	if err := p.put(g, tight); err != nil {
		t.Fatal(err)
	}

	loose := cgroup.Limits{MemoryBytes: 256 << 20}
	g2, base, err := p.get(loose)
	if err != nil {
		t.Fatal(err)
	}
	if g2 != g {
		t.Fatalf("the pool made a new group instead of reusing its free one")
	}
	second := &jobLimits{group: g2, base: base}
	if st := runInGroup(t, g2, "x = b'x' * (64 << 20)\nprint('fine')"); !st.Success() {
		t.Fatalf("second job ended %v", st)
	}
	if u := second.usage(); u.OOMKills != 0 || u.PidsMaxHits != 0 {
		t.Fatalf("second job's usage %+v, want none of the first job's", u)
	}
	if err := p.put(g2, loose); err != nil {
		t.Fatal(err)
	}

	// Back to the tight limits, written again; then the same once more,
	// which the group keeps from its last job.
	for i := 3; i <= 4; i++ {
		g, base, err := p.get(tight)
		if err != nil {
			t.Fatal(err)
		}
		jl := &jobLimits{group: g, base: base}
		runInGroup(t, g, hog)
		if u := jl.usage(); u.OOMKills != 1 {
			t.Fatalf("job %d's usage %+v, want its own OOM kill", i, u)
		}
		st := runInGroup(t, g, "import os\npids = [os.fork() for _ in range(12)]")
		if st.Success() || jl.usage().PidsMaxHits < 1 {
			t.Fatalf("job %d forked past its process limit: %v, usage %+v", i, st, jl.usage())
		}
		if err := p.put(g, tight); err != nil {
			t.Fatal(err)
		}
	}
}

// startInGroup starts a sleep in g (a shell joins g, then becomes sleep)
// and waits until g counts it; the test's cleanup kills and reaps it.
func startInGroup(t *testing.T, g *cgroup.Group) *exec.Cmd {
	t.Helper()
	join := ""
	for _, f := range g.ProcsFiles() {
		join += "echo 0 > " + strconv.Quote(f) + " && "
	}
	cmd := exec.Command("/bin/sh", "-c", join+"echo joined && exec sleep 1000")
	out, err := cmd.StdoutPipe()
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
	line := make([]byte, len("joined"))
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "joined" {
		t.Fatalf("the process did not join its group: %q, %v", line, err)
	}
	return cmd
}

// A group is never handed out with a process in it: put kills what is
// left in a group that did not empty by itself (settle), and a process
// that joins a pooled group afterwards (a start cut short) is killed by
// the get that hands it out next, which counts the job from the group's
// counters read again then.
func TestCgroupPoolNeverHandsOutAGroupWithAProcess(t *testing.T) {
	t.Parallel()
	p := newCgroupPool(t)
	l := cgroup.Limits{Pids: 8}
	g, _, err := p.get(l)
	if err != nil {
		t.Fatal(err)
	}
	left := startInGroup(t, g)
	settle(g)
	if err := p.put(g, l); err != nil {
		t.Fatal(err)
	}
	if err := left.Wait(); err == nil || left.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process left in the group ended %v, want killed by put", left.ProcessState)
	}

	late := startInGroup(t, g)
	g2, base, err := p.get(l)
	if err != nil {
		t.Fatal(err)
	}
	if g2 != g {
		t.Fatal("the pool did not reuse its group")
	}
	if err := late.Wait(); err == nil || late.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process that joined the pooled group ended %v, want killed by get", late.ProcessState)
	}
	if u := g2.Usage().Sub(base); u.PidsMaxHits != 0 || u.OOMKills != 0 {
		t.Fatalf("the next job starts with counters %+v, want none", u)
	}
	settle(g2)
	if n, ok := g2.Tasks(); !ok || n != 0 {
		t.Fatalf("the group handed out counts %d tasks (%v) once its killed process is reaped, want 0", n, ok)
	}
	if err := p.put(g2, l); err != nil {
		t.Fatal(err)
	}
}

// A job that hands memory it made to a process outside its group (here a
// memfd; in a worker, to another job or context of its session, over a
// Unix socket) leaves that memory charged to its group for as long as the
// other process holds it. The group must not go back to the pool: a job of
// another session that got it started with the first job's memory counted
// against its limit, and was killed for memory it never used (800 MiB
// held, a job of 400 MiB killed at its 1 GiB limit). And what holds it
// must end: the memory counts against no live job's limit, and no
// process's size shows it to the kernel's OOM killer.
func TestCgroupPoolReusesNoGroupHoldingAnotherJobsMemory(t *testing.T) {
	t.Parallel()
	p := newCgroupPool(t)
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	lim := cgroup.Limits{MemoryBytes: 96 << 20, Pids: 8}
	// fill runs a job in a group of the pool that writes 64 MiB into a
	// memfd and ends, the memfd then held by the test alone.
	fill := func() (*cgroup.Group, *os.File) {
		t.Helper()
		g, _, err := p.get(lim)
		if err != nil {
			t.Fatal(err)
		}
		fd, err := unix.MemfdCreate("held", 0)
		if err != nil {
			t.Skipf("memfd_create: %v", err)
		}
		held := os.NewFile(uintptr(fd), "held")
		join := ""
		for _, f := range g.ProcsFiles() {
			join += "echo 0 > " + strconv.Quote(f) + " && "
		}
		code := "import os\nb = b'x' * (1 << 20)\nfor _ in range(64): os.write(3, b)"
		cmd := exec.Command("/bin/sh", "-c", join+`exec "$@"`, "sh", py, "-c", code)
		cmd.ExtraFiles = []*os.File{held}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("filling the memfd: %v\n%s", err, out)
		}
		if n := g.Held(); n < 60<<20 {
			t.Fatalf("group charged for %d bytes of the memfd, want 64 MiB", n)
		}
		return g, held
	}

	g, held := fill()
	defer held.Close()
	if err := p.put(g, lim); err == nil {
		t.Errorf("put of a group charged for memory held outside it: no error")
	}
	g2, _, err := p.get(lim)
	if err != nil {
		t.Fatal(err)
	}
	if g2 == g {
		t.Fatalf("the pool handed out again the group still charged for %d bytes", g.Held())
	}
	if n := g2.Held(); n > heldMax {
		t.Fatalf("next job's group starts charged for %d bytes", n)
	}
	// 64 MiB held would leave a job of 48 MiB under a 96 MiB limit no room.
	if st, stderr := runInGroupOutput(t, g2, "x = b'x' * (48 << 20)\nprint('fine')"); !st.Success() {
		t.Fatalf("next job, 48 MiB under a 96 MiB limit, ended %v:\n%s", st, stderr)
	}
	if err := p.put(g2, lim); err != nil {
		t.Fatal(err)
	}

	// With a uid per session, what holds the memory is of the session's
	// uid, and is killed.
	if os.Geteuid() != 0 {
		t.Skip("the rest needs root, to run a process as another uid")
	}
	p.killUID = killUID
	const uid = 1999999917 // below the sessions' range: no session's
	g3, held3 := fill()
	holder := exec.Command("/bin/sleep", "120") // holding the memfd as its fd 3
	holder.ExtraFiles = []*os.File{held3}
	holder.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- holder.Wait() }()
	defer holder.Process.Kill()
	held3.Close()
	err = p.putJob(g3, lim, uid)
	var he *heldError
	if !errors.As(err, &he) || he.killed < 1 {
		t.Fatalf("putJob of a group whose memory a process of uid %d holds: %v, want that process killed", uid, err)
	}
	select {
	case err := <-done:
		if st, ok := err.(*exec.ExitError); !ok || st.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("holder ended %v, want SIGKILL", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("holder still runs after putJob")
	}
}

// A job's TCP buffers are its group's: on cgroup v1 they counted against
// no group, only against the host's tcp_mem, which every TCP socket of the
// host shares. A job of 20 loopback connections it wrote to and never read
// held 235 MB of them under any memory limit (11 MB a connection), so one
// job of the default 1,024 descriptors could pass tcp_mem's hard limit,
// past which every TCP socket of the host, the worker's own connections to
// NATS and Redis included, fails to send.
func TestCgroupPoolBoundsTCPBuffers(t *testing.T) {
	t.Parallel()
	g := socketBufferGroup(t)
	fill := `
import socket, sys
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(64)
keep, total = [], 0
for i in range(20):
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    c.connect(srv.getsockname()); s, _ = srv.accept()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    c.setblocking(False)
    try:
        while True:
            total += c.send(b"x" * 65536)
    except OSError:
        pass
    keep += [c, s]
print("queued", total, file=sys.stderr)
`
	queued := runFiller(t, g, fill, "queued")
	t.Logf("queued %d bytes on 20 loopback connections", queued)
	if queued > 64<<20 {
		t.Fatalf("a job queued %d bytes in TCP buffers, past its group's 16 MiB (64 MiB memory on v2)", queued)
	}
}

// UDP receive buffers are socket memory like TCP's, and the host's
// udp_mem, which every UDP socket of the host shares, bounds them all
// together: on cgroup v1 nothing of the memory controller counted them
// unless the group has a TCP buffer limit (the kernel charges a v1 group's
// sockets, UDP included, to memory.kmem.tcp once it has one). A job of
// datagrams it sent itself and never read must be held at its group's
// limit as its TCP buffers are, not reach udp_mem, past which every UDP
// socket of the host (the host's DNS included) drops what it receives.
func TestCgroupPoolBoundsUDPBuffers(t *testing.T) {
	t.Parallel()
	g := socketBufferGroup(t)
	// 40 receivers of up to twice net.core.rmem_max each (4 MiB on the
	// development machine: 320 MiB in all without a bound). The sender
	// pauses now and then so that loopback's backlog drops nothing; what
	// is queued is what the receivers hold (SO_MEMINFO's rmem_alloc).
	fill := `
import socket, struct, sys, time
SO_MEMINFO = 55
keep, held = [], 0
for i in range(40):
    r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
    r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 30)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(r.getsockname())
    for j in range(160):
        try:
            s.send(b"x" * 60000)
        except OSError:
            break
        if j % 16 == 15:
            time.sleep(0.001)
    time.sleep(0.005)
    keep += [r, s]
for r in keep[::2]:
    held += struct.unpack("9I", r.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 36))[0]
print("held", held, file=sys.stderr)
`
	held := runFiller(t, g, fill, "held")
	t.Logf("held %d bytes in 40 UDP receive buffers", held)
	if held > 64<<20 {
		t.Fatalf("a job held %d bytes in UDP receive buffers, past its group's 16 MiB (64 MiB memory on v2)", held)
	}
}

// Kernel memory a job leaves charged to its group, held from outside it,
// keeps the group out of the pool as its anonymous and shared memory does:
// a job made empty files in its /tmp (a tmpfs of its own mount namespace)
// and passed a descriptor of the directory to another process of its
// session; the file system, and every inode and dentry of it, charged to
// the job's group, lived on with the descriptor once the job's namespace
// was gone. Not one page of it is anonymous or shared memory (Held).
func TestCgroupPoolReusesNoGroupHoldingAnotherJobsKernelMemory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root, to mount a tmpfs in a mount namespace of its own")
	}
	p := newCgroupPool(t)
	lim := cgroup.Limits{MemoryBytes: 256 << 20, Pids: 8}
	g, _, err := p.get(lim)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mine := os.NewFile(uintptr(pair[0]), "mine")
	defer mine.Close()
	theirs := os.NewFile(uintptr(pair[1]), "theirs")
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("no python3: %v", err)
	}
	join := ""
	for _, f := range g.ProcsFiles() {
		join += "echo 0 > " + strconv.Quote(f) + " && "
	}
	// The job: its own mount namespace, a tmpfs in it, 60,000 empty files,
	// and its directory's descriptor sent on fd 3.
	code := `
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x20000) != 0 or libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) != 0:
    sys.exit("unshare or make private: %d" % ctypes.get_errno())
d = sys.argv[1]
if libc.mount(b"tmpfs", d.encode(), b"tmpfs", 0, b"mode=700") != 0:
    sys.exit("mount tmpfs: %d" % ctypes.get_errno())
for i in range(60000):
    open(os.path.join(d, str(i)), "w").close()
s = socket.socket(fileno=3)
socket.send_fds(s, [b"x"], [os.open(d, os.O_RDONLY | os.O_DIRECTORY)])
`
	cmd := exec.Command("/bin/sh", "-c", join+`exec "$@"`, "sh", py, "-c", code, t.TempDir())
	cmd.ExtraFiles = []*os.File{theirs}
	out, err := cmd.CombinedOutput()
	theirs.Close()
	if err != nil {
		t.Fatalf("the job: %v\n%s", err, out)
	}
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(mine.Fd()), buf, oob, 0)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no descriptor from the job: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("no descriptor from the job: %v", err)
	}
	held := os.NewFile(uintptr(fds[0]), "tmp") // the job's /tmp, kept
	defer held.Close()
	if k := g.Kernel(); k < 20<<20 {
		t.Fatalf("the group is charged for %d bytes of kernel memory, want the job's /tmp's inodes", k)
	}
	t.Logf("kernel memory charged to the emptied group: %d bytes; anonymous and shared: %d", g.Kernel(), g.Held())
	if err := p.put(g, lim); err == nil {
		t.Errorf("put of a group charged for %d bytes of kernel memory held outside it: no error", g.Kernel())
	}
	g2, _, err := p.get(lim)
	if err != nil {
		t.Fatal(err)
	}
	defer p.put(g2, lim)
	if g2 == g {
		t.Fatalf("the pool handed out again the group still charged for %d bytes of kernel memory", g.Kernel())
	}
}

// A group whose job left only caches of the kernel (the dentries and inodes
// of the files it made, which nothing holds) goes back to the pool:
// reclaim takes them.
func TestCgroupPoolReusesAGroupOfReclaimableKernelMemory(t *testing.T) {
	t.Parallel()
	p := newCgroupPool(t)
	lim := cgroup.Limits{MemoryBytes: 256 << 20, Pids: 8}
	g, _, err := p.get(lim)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code := "import os\nfor i in range(60000):\n    open(os.path.join(" + strconv.Quote(dir) + ", str(i)), 'w').close()"
	if st, stderr := runInGroupOutput(t, g, code); !st.Success() {
		t.Fatalf("the job ended %v:\n%s", st, stderr)
	}
	t.Logf("kernel memory charged to the emptied group: %d bytes", g.Kernel())
	if err := p.put(g, lim); err != nil {
		t.Fatalf("put of a group of reclaimable caches: %v", err)
	}
	g2, _, err := p.get(lim)
	if err != nil {
		t.Fatal(err)
	}
	defer p.put(g2, lim)
	if g2 != g {
		t.Error("the group of reclaimable caches was not reused")
	}
}

// runFiller runs src in g and returns the number it ends by printing to
// stderr after word ("queued 123").
func runFiller(t *testing.T, g *cgroup.Group, src, word string) int64 {
	t.Helper()
	st, stderr := runInGroupOutput(t, g, src)
	if !st.Success() {
		t.Fatalf("filler ended %v:\n%s", st, stderr)
	}
	var n int64
	if _, err := fmt.Sscanf(strings.TrimSpace(stderr), word+" %d", &n); err != nil {
		t.Fatalf("filler said %q", stderr)
	}
	return n
}

// socketBufferGroup returns a group of the pool with a TCP buffer limit of
// 16 MiB and 256 MiB of memory (64 MiB on v2, where socket buffers count
// in memory.max), given back when the test ends.
func socketBufferGroup(t *testing.T) *cgroup.Group {
	t.Helper()
	p := newCgroupPool(t)
	p.tcpBytes = 16 << 20
	lim := cgroup.Limits{MemoryBytes: 256 << 20, Pids: 8}
	if p.m.Version() == 2 {
		lim.MemoryBytes = 64 << 20
	}
	g, _, err := p.get(lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.put(g, lim) })
	return g
}
