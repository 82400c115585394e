//go:build linux

package runner

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/worker/sandbox"
)

// children returns the pids of pid's children (on the host).
func children(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// nsPIDOrGone is nsPID, or "" for a process gone since it was listed.
func nsPIDOrGone(pid string) string {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return f[len(f)-1]
		}
	}
	return ""
}

// nsPID returns the last field of NSpid in /proc/<pid>/status: the pid
// of the process in its own PID namespace.
func nsPID(t *testing.T, pid string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return f[len(f)-1]
		}
	}
	t.Fatalf("no NSpid in /proc/%s/status", pid)
	return ""
}

// procMounts counts the proc file systems mounted on /proc in pid's view:
// a spare's own, over the zygote's, is its last step before it waits.
func procMounts(pid string) int {
	data, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		return 0
	}
	n := 0
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[4] == "/proc" && slices.Contains(f, "proc") {
			n++
		}
	}
	return n
}

// waitForSpares waits until the zygote has n spares ready for a job (their
// namespaces made, a /proc of their own mounted) and returns them: each the
// job's process-to-be, pid 2 of a PID namespace whose init (pid 1) is a
// small init, both the zygote's children; or, where the zygote has no small
// init, each the init of its namespace with the job's process forked
// under it.
func waitForSpares(t *testing.T, z *Zygote, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		kids := children(t, z.Info().PID)
		var spares []string
		inits := 0
		for _, k := range kids {
			// A child listed may be gone a moment later (a job's process
			// reaped, a spare replaced): it is then neither, and the
			// zygote is looked at again.
			switch nsPIDOrGone(k) {
			case "2":
				if procMounts(k) >= 2 {
					spares = append(spares, k)
				}
			case "1":
				// No small init: the spare is the init, and its one child the
				// job's process, pid 2 (not a job's keeper, pid 3, which a
				// job's init that has not yet exited may hold a moment).
				if p, err := os.ReadFile("/proc/" + k + "/task/" + k + "/children"); err == nil && len(strings.Fields(string(p))) == 1 && procMounts(k) >= 2 && nsPIDOrGone(strings.Fields(string(p))[0]) == "2" {
					spares = append(spares, k)
				} else {
					inits++
				}
			}
		}
		if len(spares) == n && len(kids) == n+inits && (inits == 0 || inits == n) {
			return spares
		}
		if time.Now().After(deadline) {
			t.Fatalf("the zygote has children %v, %d of them ready spares and %d small inits; want %d spares", kids, len(spares), inits, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A sandboxed zygote keeps two spares, so that a caller's next job finds
// one ready while the one after it is prepared. Each spare is pid 2 of a
// PID namespace of its own, forked once from the zygote, whose init (pid 1)
// is a small program of the zygote's, not a second copy of the interpreter:
// one fork of the interpreter per job, and the job's wait status is the
// zygote's to read from the kernel. The init holds no descriptor.
func TestSandboxedZygoteKeepsTwoSparesUnderSmallInits(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
	zrun(t, z, l.spec(t, "a", testUIDA, "print(1)"))
	zpid := strconv.Itoa(z.Info().PID)
	own, err := os.Readlink("/proc/" + zpid + "/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	spares := waitForSpares(t, z, 2)
	inits := map[string]string{} // PID namespace -> the zygote's child that is its pid 1
	for _, k := range children(t, z.Info().PID) {
		if nsPID(t, k) == "1" {
			ns, _ := os.Readlink("/proc/" + k + "/ns/pid")
			inits[ns] = k
		}
	}
	var seen []string
	for _, spare := range spares {
		ns, err := os.Readlink("/proc/" + spare + "/ns/pid")
		if err != nil {
			t.Fatal(err)
		}
		if ns == own || slices.Contains(seen, ns) {
			t.Errorf("spare %s is in PID namespace %s, the zygote's %s or another spare's: want one of its own", spare, ns, own)
		}
		seen = append(seen, ns)
		if got := nsPID(t, spare); got != "2" {
			t.Errorf("spare %s is pid %s in its namespace, want 2 (under a small init)", spare, got)
		}
		init, ok := inits[ns]
		if !ok {
			t.Errorf("spare %s: no child of the zygote is the init of its namespace %s (children %v)", spare, ns, children(t, z.Info().PID))
			continue
		}
		exe, _ := os.Readlink("/proc/" + init + "/exe")
		comm, _ := os.ReadFile("/proc/" + init + "/comm")
		if !strings.Contains(exe, "memfd:codexec-init") || string(comm) != "codexec-init\n" {
			t.Errorf("the init of spare %s's namespace runs %q, named %q, want the small init (memfd:codexec-init, named codexec-init)", spare, exe, comm)
		}
		if fds, err := os.ReadDir("/proc/" + init + "/fd"); err != nil || len(fds) != 0 {
			t.Errorf("the init of spare %s's namespace holds %d descriptors (%v), want none", spare, len(fds), err)
		}
	}
	// And a job runs in the first of them: pid 2, its parent (the zygote)
	// outside its namespace.
	if out := zrun(t, z, l.spec(t, "a", testUIDA, "import os; print(os.getpid(), os.getppid())")); string(out.Stdout) != "2 0\n" {
		t.Errorf("the job's pid and parent: %q, want 2 0", out.Stdout)
	}
}

// orphansSrc leaves 20 orphans, each of which exits at once, and prints
// how many zombies its namespace holds a moment later.
const orphansSrc = `import os, time
for _ in range(20):
    if os.fork() == 0:  # a child that leaves a grandchild behind, then exits
        if os.fork() == 0:
            os._exit(0)
        os._exit(0)
    os.wait()
def state(pid):
    try:
        return open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()[0]
    except OSError:
        return None  # reaped since the listing
deadline = time.monotonic() + 5
while True:
    zombies = [state(p) for p in os.listdir('/proc') if p.isdigit()].count('Z')
    if zombies == 0 or time.monotonic() > deadline:
        break
    time.sleep(0.01)
print(zombies)
`

// The init of a job's PID namespace reaps what the job orphans, the small
// init as the interpreter that stands in for it elsewhere: a child whose
// parent exited is reparented to it, and when it ends it does not stay a
// zombie holding a pid of the job's (the job's pids limit counts zombies).
func TestSandboxedJobsOrphansAreReaped(t *testing.T) {
	l := newSandboxLayout(t)
	for _, interpreterInit := range []bool{false, true} {
		cfg := *l.cfg
		cfg.interpreterInit = interpreterInit
		z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}, Sandbox: &cfg})
		for i := range 3 { // the first job, and jobs in spares made ahead
			if out := zrun(t, z, l.spec(t, "a", testUIDA, orphansSrc)); out.ExitCode != 0 || string(out.Stdout) != "0\n" {
				t.Errorf("interpreter init %v, job %d: exit %d, zombies left %q (stderr %s), want 0", interpreterInit, i, out.ExitCode, out.Stdout, out.Stderr)
			}
		}
	}
}

// Where the small init cannot run (machines other than x86-64, or exec from
// a memfd refused), each spare is the init of its PID namespace, a copy of
// the interpreter that forks the job's process (pid 2) and reports its wait
// status: the path before the small init, kept and tested here.
func TestSandboxedZygoteWithInterpreterInit(t *testing.T) {
	l := newSandboxLayout(t)
	cfg := *l.cfg
	cfg.interpreterInit = true
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: &cfg})
	zrun(t, z, l.spec(t, "a", testUIDA, "print(1)"))
	for _, spare := range waitForSpares(t, z, 2) {
		if got := nsPID(t, spare); got != "1" {
			t.Errorf("spare %s is pid %s in its namespace, want 1 (its init)", spare, got)
		}
		if job := children(t, mustAtoi(t, spare)); len(job) != 1 || nsPID(t, job[0]) != "2" {
			t.Errorf("spare %s has children %v, want the job's process, pid 2 of its namespace", spare, job)
		}
	}
	for src, want := range map[string]string{
		"import os; print(os.getpid(), os.getppid())":             "exit 0, 2 1\n",
		"import sys; print('x'); sys.exit(3)":                     "exit 3, x\n",
		"import os, signal; os.kill(os.getpid(), signal.SIGKILL)": "exit -1 (killed), ",
	} {
		out := zrun(t, z, l.spec(t, "a", testUIDA, src))
		got := fmt.Sprintf("exit %d, %s", out.ExitCode, out.Stdout)
		if out.Signal != "" {
			got = fmt.Sprintf("exit %d (%s), %s", out.ExitCode, out.Signal, out.Stdout)
		}
		if got != want {
			t.Errorf("%s: %q (stderr %s), want %q", src, got, out.Stderr, want)
		}
	}
}

// A job joins its cgroups (Confinement.Cgroups) and then sees none of the
// cgroup directories (Confinement.Unmount), whether its spare learnt those
// directories from an earlier job and took them out of its view ahead of
// time (every job but a zygote's first two) or not. A directory bound into
// the sandbox stands in for the cgroup hierarchies: joining writes "0" to a
// file in it. Where the cgroup has a tasks file (cgroup v1), the job's
// process, which has one thread, joins through it: a write to cgroup.procs
// waits for an RCU grace period, one to tasks does not. Where it has none
// (cgroup v2), through cgroup.procs.
func TestSandboxedZygoteJoinsCgroupsThroughDirectoriesHiddenAhead(t *testing.T) {
	l := newSandboxLayout(t)
	cg := filepath.Join(filepath.Dir(l.sessions), "cgroups")
	v1, v2 := filepath.Join(cg, "v1", "job-1"), filepath.Join(cg, "v2", "job-1")
	files := map[string]string{ // what each file must hold after a job
		filepath.Join(v1, "cgroup.procs"): "x", filepath.Join(v1, "tasks"): "0",
		filepath.Join(v2, "cgroup.procs"): "0",
	}
	for _, d := range []string{v1, v2} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := *l.cfg
	cfg.Mounts = append(slices.Clip(cfg.Mounts), sandbox.Mount{Path: cg, Write: true})
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: &cfg})
	for i := range 3 { // the third job runs in a spare that knew the directories
		for f := range files {
			if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s := l.spec(t, "a", testUIDA, fmt.Sprintf("import os; print(os.path.exists(%q), os.listdir(%q))", v1, cg))
		s.Confine.Cgroups = []string{filepath.Join(v1, "cgroup.procs"), filepath.Join(v2, "cgroup.procs")}
		s.Confine.Unmount = []string{cg}
		out := zrun(t, z, s)
		if out.ExitCode != 0 || string(out.Stdout) != "False []\n" {
			t.Errorf("job %d: exit %d, stdout %q (stderr %s): want the cgroup directories out of its view", i, out.ExitCode, out.Stdout, out.Stderr)
		}
		for f, want := range files {
			if data, err := os.ReadFile(f); err != nil || string(data) != want {
				t.Errorf("job %d: %s holds %q (%v), want %q", i, f, data, err, want)
			}
		}
	}
	// The spares forked since the first job know the directories: by now
	// (the first job's spare and the one forked before it have run the
	// first two jobs) every spare has taken them out of its view.
	for _, spare := range waitForSpares(t, z, 2) {
		// Its view of the file system, from the host.
		if _, err := os.Stat("/proc/" + spare + "/root" + v1); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("spare %s still sees %s (%v): want the directories taken out of its view ahead of the job", spare, v1, err)
		}
	}
}

// A one-shot zygote (Fresh's: one job, then stopped) asks for one spare,
// not two: a second would be forked and prepared for nothing.
func TestOneShotSandboxedZygoteKeepsOneSpare(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}, Sandbox: l.cfg, OneShot: true})
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", z.Info().PID))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
	var cfg struct {
		Sandbox *struct {
			Spares int `json:"spares"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal([]byte(args[len(args)-1]), &cfg); err != nil || cfg.Sandbox == nil {
		t.Fatalf("the zygote's configuration %q: %v", args[len(args)-1], err)
	}
	if cfg.Sandbox.Spares != 1 {
		t.Errorf("a one-shot zygote asks for %d spares, want 1", cfg.Sandbox.Spares)
	}
	waitForSpares(t, z, 1)
	zrun(t, z, l.spec(t, "a", testUIDA, "print(1)"))
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
