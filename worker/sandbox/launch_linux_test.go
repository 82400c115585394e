package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The built-in launcher, tested on the real kernel: each test runs a
// shell in a sandbox built by this test binary started again, and checks
// what the shell saw.

// builtin probes the built-in launcher, or skips (fails in CI) where the
// machine forbids namespaces.
func builtin(t *testing.T, cfg Config) *Sandbox {
	t.Helper()
	cfg.Launcher = LauncherBuiltin
	s, err := Probe(context.Background(), cfg)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("the built-in launcher cannot work here: %v", err)
	}
	return s
}

// inBox runs script with /bin/sh in a sandbox of s and returns its output.
func inBox(t *testing.T, s *Sandbox, o Options, script string) string {
	t.Helper()
	argv := s.Args(o, "/bin/sh", "-c", script)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("sandbox: %v\n%s", err, out)
	}
	return string(out)
}

// field is the value of "key: value" (or "key\tvalue") in out.
func field(out, key string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "<none>"
}

func TestBuiltinSandboxFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the host files this test compares against need root")
	}
	rw, ro := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "data"), []byte("host data"), 0o644); err != nil {
		t.Fatal(err)
	}
	hostTmp, err := os.CreateTemp("/tmp", "nsbox-host-*")
	if err != nil {
		t.Fatal(err)
	}
	hostTmp.Close()
	defer os.Remove(hostTmp.Name())
	s := builtin(t, Config{})
	out := inBox(t, s, Options{Mounts: []Mount{{Path: rw, Write: true}, {Path: ro}}}, fmt.Sprintf(`
		echo "shadow: $(cat /etc/shadow 2>/dev/null | wc -c)"
		echo "usr: $(touch /usr/nsbox-probe 2>&1 || true)"
		echo "ro: $(cat %[2]s/data) $(touch %[2]s/new 2>&1 || true)"
		echo sandboxed > %[1]s/written && echo "rw: ok"
		echo "tmp: $(test -e %[3]s && echo host-tmp-visible || echo private)"
		echo "pids: $(ls /proc | grep -c '^[0-9]') $(cat /proc/1/comm)"
		echo "net: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"
		echo "hostname: $(cat /proc/sys/kernel/hostname)"
		echo "root: $(touch /nsbox-root && echo written)"
		echo "dev: $(ls /dev | tr '\n' ' ')"
		echo "procsys: $( (echo x > /proc/sys/kernel/domainname) 2>&1 || true)"
	`, rw, ro, hostTmp.Name()))
	for key, want := range map[string]string{
		"shadow":   "0",
		"usr":      "touch: cannot touch '/usr/nsbox-probe': Read-only file system",
		"ro":       "host data touch: cannot touch '" + ro + "/new': Read-only file system",
		"rw":       "ok",
		"tmp":      "private",
		"net":      "lo",
		"hostname": "codexec",
		"root":     "written", // a tmpfs of the sandbox's own
		"dev":      "core fd full null ptmx pts random shm stderr stdin stdout tty urandom zero",
	} {
		if got := field(out, key); got != want {
			t.Errorf("%s: got %q, want %q\n%s", key, got, want, out)
		}
	}
	// PID 1 (the launcher), the shell, and what it runs to count them:
	// nothing of the host's.
	if n, comm, _ := strings.Cut(field(out, "pids"), " "); comm != LauncherName || len(n) != 1 {
		t.Errorf("/proc shows %s processes and PID 1 %q, want a few and the launcher", n, comm)
	}
	if got := field(out, "procsys"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("/proc/sys is writable: %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(rw, "written")); err != nil || string(b) != "sandboxed\n" {
		t.Errorf("a writable mount did not reach the host: %q %v", b, err)
	}
	if _, err := os.Stat("/nsbox-root"); err == nil {
		os.Remove("/nsbox-root")
		t.Error("a write to the sandbox's / reached the host's")
	}
	if b, _ := os.ReadFile("/etc/shadow"); len(b) == 0 {
		t.Log("the host's /etc/shadow is empty too: the shadow check proves less here")
	}
}

func TestBuiltinSandboxDropsEveryCapabilityButThoseKept(t *testing.T) {
	s := builtin(t, Config{})
	status := "grep -E '^(Cap|NoNewPrivs)' /proc/self/status"
	out := inBox(t, s, Options{}, status)
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if got := field(out, k); got != "0000000000000000" {
			t.Errorf("%s = %s, want none\n%s", k, got, out)
		}
	}
	if got := field(out, "NoNewPrivs"); got != "1" {
		t.Errorf("NoNewPrivs = %s, want 1", got)
	}
	// CAP_KILL (5) and CAP_SYS_ADMIN (21) kept: in every set, the
	// bounding set included, and no other.
	out = inBox(t, s, Options{Caps: []string{"CAP_KILL", "CAP_SYS_ADMIN"}}, status)
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if got := field(out, k); got != "0000000000200020" {
			t.Errorf("%s = %s, want 0000000000200020 (KILL, SYS_ADMIN)\n%s", k, got, out)
		}
	}
}

// As a user that is not root, the sandbox has a user namespace of its own
// in which the caller's uid and gid, and nothing else, are mapped.
func TestBuiltinSandboxWithoutRootMapsTheCallersIDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("runs the launcher as nobody, which needs root to start")
	}
	s := builtin(t, Config{})
	s.rootless = true // what Probe finds for a worker that is not root
	argv := s.Args(Options{}, "/bin/sh", "-c", `echo "uid: $(id -u) $(id -g)"; echo "map: $(cat /proc/self/uid_map)"; echo "gmap: $(cat /proc/self/gid_map)"; grep CapEff /proc/self/status`)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		if strings.Contains(out, "creating new namespaces failed") && os.Getenv("CI") != "true" {
			t.Skipf("unprivileged user namespaces are not allowed here: %s", out)
		}
		t.Fatalf("%v\n%s", err, out)
	}
	if got := field(out, "uid"); got != "65534 65534" {
		t.Errorf("ids %q, want 65534 65534\n%s", got, out)
	}
	for _, k := range []string{"map", "gmap"} {
		if got := strings.Join(strings.Fields(field(out, k)), " "); got != "65534 65534 1" {
			t.Errorf("%s %q, want 65534 65534 1", k, got)
		}
	}
	if got := field(out, "CapEff"); got != "0000000000000000" {
		t.Errorf("CapEff = %s, want none", got)
	}
}

// The info descriptor tells the host pid of the sandbox's PID 1, which
// is the command itself with AsPID1; the launcher exits as the command did.
func TestBuiltinSandboxInfoFDAndExitStatus(t *testing.T) {
	s := builtin(t, Config{})
	tag := fmt.Sprintf("nsbox-%d", time.Now().UnixNano())
	argv := s.Args(Options{AsPID1: true, InfoFD: 3}, "/bin/sh", "-c", `echo "pid: $$"; read x; exit 7`, tag)
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child := startWithInfo(t, cmd)
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if got := field(line, "pid"); got != "1" {
		t.Errorf("with AsPID1 the command is pid %s in the sandbox, want 1", got)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", child))
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", child))
	if !strings.Contains(string(cmdline), tag) || !strings.HasSuffix(field(string(status), "NSpid"), "\t1") {
		t.Errorf("child-pid %d is not the command (cmdline %q, NSpid %q)", child, cmdline, field(string(status), "NSpid"))
	}
	stdin.Close()
	err = cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("launcher ended with %v, want exit status 7", err)
	}
	// Without AsPID1 a reaper is PID 1 and the command its child.
	out := inBox(t, s, Options{}, `echo "pid: $$ $(cat /proc/1/comm)"`)
	if pid, comm, _ := strings.Cut(field(out, "pid"), " "); pid == "1" || comm != LauncherName {
		t.Errorf("without AsPID1 the command is pid %s and PID 1 is %q, want a launcher as PID 1", pid, comm)
	}
}

// The sandbox dies with the process that started the launcher.
func TestBuiltinSandboxDiesWithItsParent(t *testing.T) {
	s := builtin(t, Config{})
	argv := s.Args(Options{AsPID1: true, InfoFD: 3}, "/bin/sleep", "1000")
	// A shell starts the launcher and is then killed; the sandbox must go
	// with it. The shell cannot name this program /proc/self/exe, as a
	// forked caller does: it names its path.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv[0] = self
	parent := exec.Command("/bin/sh", append([]string{"-c", `"$@" & wait`, "sh"}, argv...)...)
	child := startWithInfo(t, parent)
	if err := parent.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	waitEnded(t, child, "the launcher's parent")
}

// startWithInfo starts cmd, whose sandbox's launcher has InfoFD 3, and
// returns the host pid of the sandbox's command that the launcher tells
// there.
func startWithInfo(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd.ExtraFiles = []*os.File{w}
	err = cmd.Start()
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(r).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info.ChildPID
}

// waitEnded waits, 30 s at most, for the sandboxed command pid to end
// once what it must not outlive has ended.
func waitEnded(t *testing.T, pid int, outlived string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("the sandboxed command %d outlived %s", pid, outlived)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// A mount made on the host under a bound directory after the sandbox
// started reaches it (a session's file system mounted at its first call
// must reach the zygote), and nothing the sandbox mounts reaches back.
func TestBuiltinSandboxReceivesLaterHostMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting on the host needs root")
	}
	s := builtin(t, Config{})
	// As the worker does with its sessions root: a mount of its own whose
	// mounts propagate (this machine's / may not).
	dir := t.TempDir()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(dir, syscall.MNT_DETACH)
	if err := syscall.Mount("", dir, "", syscall.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	argv := s.Args(Options{Mounts: []Mount{{Path: dir, Write: true}}}, "/bin/sh", "-c", fmt.Sprintf(`echo ready; read x; cat %s/marker`, sub))
	cmd := exec.Command(argv[0], argv[1:]...)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(stdout)
	if line, err := rd.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("sandbox said %q, %v", line, err)
	}
	if err := syscall.Mount("tmpfs", sub, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(sub, syscall.MNT_DETACH)
	if err := os.WriteFile(filepath.Join(sub, "marker"), []byte("mounted later\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stdin.Write([]byte("go\n"))
	stdin.Close()
	rest, _ := rd.ReadString(0)
	if err := cmd.Wait(); err != nil || rest != "mounted later\n" {
		t.Fatalf("the sandbox saw %q (%v), want the host's later mount", rest, err)
	}
}

// BenchmarkLauncher measures what a sandbox costs to build, side by side
// for both launchers: /bin/true in a sandbox like a zygote's (AsPID1,
// the zygote's capabilities), one at a time and 8 at once.
//
//	go test -run '^$' -bench Launcher -count 6 ./worker/sandbox
func BenchmarkLauncher(b *testing.B) {
	for _, l := range []string{LauncherBuiltin, LauncherBwrap} {
		s, err := Probe(context.Background(), Config{Launcher: l})
		if err != nil {
			b.Logf("%s: %v", l, err)
			continue
		}
		argv := s.Args(Options{AsPID1: true, Caps: []string{"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_NET_ADMIN"}}, "/bin/true")
		run := func(b *testing.B) {
			if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
		b.Run(l+"/sequential", func(b *testing.B) {
			for b.Loop() {
				run(b)
			}
		})
		b.Run(l+"/8-concurrent", func(b *testing.B) {
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					run(b)
				}
			})
		})
	}
}

// Both launchers build the same sandbox from one command line: the same
// mounts (read-only where bubblewrap's are), /dev, ids, capabilities,
// hostname and network. They differ where the built-in one is stricter:
// /proc/sys read-only, and (as root) the bounding set emptied.
func TestLaunchersBuildTheSameSandbox(t *testing.T) {
	bw, err := Probe(context.Background(), Config{Launcher: LauncherBwrap})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no bubblewrap to compare with: %v", err)
	}
	bi := builtin(t, Config{})
	dir := t.TempDir()
	o := Options{Mounts: []Mount{{Path: dir, Write: true}}, Caps: []string{"CAP_KILL"}}
	// Mount points with ro or rw, but /proc/sys; the rest as is.
	script := `
		awk '$5 != "/proc/sys" { split($6, o, ","); print $5, o[1] }' /proc/self/mountinfo
		ls -l /dev | awk 'NR > 1 { print $1, $NF }'
		id; hostname; cut -d: -f1 /proc/net/dev
		grep -E '^(CapInh|CapPrm|CapEff|CapAmb|NoNewPrivs)' /proc/self/status
		ls -ld / /tmp /etc /usr | awk '{ print $1, $NF }'`
	for _, asPID1 := range []bool{false, true} {
		o.AsPID1 = asPID1
		want, got := inBox(t, bw, o, script), inBox(t, bi, o, script)
		if got != want {
			t.Errorf("AsPID1 %v: the built-in launcher's sandbox differs from bubblewrap's:\n--- bubblewrap\n%s\n--- builtin\n%s", asPID1, want, got)
		}
	}
}

// A worker whose binary was deleted or replaced since it started (an
// upgrade; `go run`, which removes its build) still launches sandboxes of
// its own binary. The test runs a copy of this test binary that deletes
// itself, then builds a sandbox.
func TestBuiltinSandboxAfterItsBinaryIsDeleted(t *testing.T) {
	if os.Getenv("NSBOX_DELETED_HELPER") == "1" {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(self); err != nil {
			t.Fatal(err)
		}
		s := builtin(t, Config{})
		fmt.Println("sandbox says:", strings.TrimSpace(inBox(t, s, Options{}, "echo $(cat /proc/1/comm)")))
		return
	}
	builtin(t, Config{})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.test")
	if err := os.WriteFile(cp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cp, "-test.run=^TestBuiltinSandboxAfterItsBinaryIsDeleted$", "-test.v")
	cmd.Env = append(os.Environ(), "NSBOX_DELETED_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "sandbox says: "+LauncherName) {
		t.Fatalf("no sandbox once the binary was deleted: %v\n%s", err, out)
	}
	if _, err := os.Stat(cp); err == nil {
		t.Fatal("the helper did not delete its binary")
	}
}

// Without AsPID1 the launcher's PID 1 (a reaper, which the command could
// see and signal) holds what the command holds, on every thread: it once
// kept every capability on the threads the Go runtime had started before
// the drop (with cgo, as codexec is built, the runtime cannot reach them;
// launch_cgo_test.go links cgo into this test for that).
func TestBuiltinSandboxReaperHoldsNoMoreThanTheCommand(t *testing.T) {
	s := builtin(t, Config{})
	out := inBox(t, s, Options{Caps: []string{"CAP_KILL"}}, `for f in /proc/1/task/*/status; do grep -E '^Cap(Prm|Eff)' $f; done | sort -u`)
	if strings.TrimSpace(out) != "CapEff:\t0000000000000020\nCapPrm:\t0000000000000020" {
		t.Fatalf("PID 1's threads hold other capabilities than the command's (CAP_KILL):\n%s", out)
	}
}

// A SIGTERM to the launcher ends the sandbox, even when the command, its
// PID 1, has no handler for it (the kernel would drop it there).
func TestBuiltinSandboxEndsWithItsLauncher(t *testing.T) {
	s := builtin(t, Config{})
	argv := s.Args(Options{AsPID1: true, InfoFD: 3}, "/bin/sleep", "1000")
	cmd := exec.Command(argv[0], argv[1:]...)
	child := startWithInfo(t, cmd)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = syscall.Kill(child, syscall.SIGKILL)
		t.Fatal("the launcher outlived a SIGTERM")
	}
	waitEnded(t, child, "its launcher")
}

// A sandbox has a cgroup namespace of its own unless HostCgroupNS keeps
// the host's: a worker on cgroup v2 needs the host's, since a process in a
// namespace of its own cannot join the job cgroups beside the worker's
// where cgroup2 is mounted with nsdelegate (seen on a GPU host: every job
// failed with ENOENT).
func TestBuiltinSandboxCgroupNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the sandbox's namespaces are compared with the host's, which needs root")
	}
	host, err := os.Readlink("/proc/self/ns/cgroup")
	if err != nil {
		t.Skipf("no cgroup namespaces here: %v", err)
	}
	s := builtin(t, Config{})
	own := strings.TrimSpace(inBox(t, s, Options{}, "readlink /proc/self/ns/cgroup"))
	kept := strings.TrimSpace(inBox(t, s, Options{HostCgroupNS: true}, "readlink /proc/self/ns/cgroup"))
	if own == host || own == "" {
		t.Errorf("by default the sandbox's cgroup namespace is %q, the host's is %q: want one of its own", own, host)
	}
	if kept != host {
		t.Errorf("with HostCgroupNS the sandbox's cgroup namespace is %q, want the host's %q", kept, host)
	}
}
