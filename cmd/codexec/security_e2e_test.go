package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/worker/diskfs"
	"github.com/mark3labs/mcp-go/mcp"
)

// The security regression suite: hostile code, through a real MCP client,
// against `codexec dev` (over HTTP, so that several sessions share one
// worker) and against a cluster (real nats-server and redis-server, a
// frontend and a worker, each its own process). Each case asserts
// containment: what the job could not reach, what the host still looks
// like afterwards, that nothing the job started outlives it; not merely
// that nothing crashed.
//
// The deployments run with --sandbox require: on a machine without a
// working sandbox the tests skip (CI=true: fail). SECURITY_E2E_BASELINE=1
// runs them without the sandbox flags, to see what an unconfined worker
// lets through; the cases that would harm the host then refuse to run.

// secCase is one case of the suite, run against a deployment with one
// session (s) already open.
type secCase struct {
	name string
	run  func(t *testing.T, tg *secTarget, s *secSession)
}

// secCases are all the cases, in the order they run: those that try to
// kill things last.
var secCases = []secCase{
	{"identity", caseIdentity},
	{"uids_per_session", caseUIDsPerSession},
	{"limits_above_maximum_rejected", caseLimitsRejected},
	{"fork_bomb", caseForkBomb},
	{"thread_bomb", caseThreadBomb},
	{"memory_bomb", caseMemoryBomb},
	{"memory_limit_covers_children", caseMemoryChildren},
	{"disk_fill", caseDiskFill},
	{"disk_limit_races", caseDiskRaces},
	{"tmp_fill", caseTmpFill},
	{"file_size", caseFileSize},
	{"open_files", caseOpenFiles},
	{"cpu_time", caseCPUTime},
	{"output_flood", caseOutputFlood},
	{"sigterm_ignoring_busy_loop", caseIgnoresSIGTERM},
	{"etc_shadow", caseShadow},
	{"other_session_files", caseOtherSession},
	{"worker_environment_and_cmdline", caseWorkerEnv},
	{"network", caseNetwork},
	{"network_loopback_per_session", caseLoopbackPerSession},
	{"interpreter_and_environment_read_only", caseReadOnlyEnv},
	{"background_processes", caseBackground},
	{"planted_symlinks", caseSymlinks},
	{"hard_links_outside", caseHardLinks},
	{"privileges", casePrivileges},
	{"system_calls", caseSystemCalls},
	{"descriptors_and_forged_result", caseDescriptors},
	{"devices", caseDevices},
	{"cgroup_escape", caseCgroupEscape},
	{"signal_worker_and_zygote", caseSignals},
	{"memory_held_past_its_job", caseMemoryHeldPastItsJob},
}

// runSecCases runs the named cases (all when names is nil) against tg.
func runSecCases(t *testing.T, tg *secTarget, names []string) {
	t.Helper()
	s := tg.newSession(t)
	t.Logf("%s: session uid %d, cwd %s, host dir %q", tg.name, s.id.UID, s.id.Cwd, s.hostDir)
	for _, c := range secCases {
		if names != nil && !slices.Contains(names, c.name) {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			c.run(t, tg, s)
			// Whatever the case did, nothing of it may be left running.
			s.assertNoLeftovers(t, "", true)
		})
	}
}

// The whole table against codexec dev, jobs forked from warm interpreters
// (the default).
func TestSecurityDev(t *testing.T) {
	requireSandbox(t)
	t.Parallel()
	runSecCases(t, startSecDev(t, "zygote"), nil)
}

// A subset against codexec dev starting a fresh interpreter per job: the
// confinement must not depend on the zygote.
func TestSecurityDevSpawn(t *testing.T) {
	requireSandbox(t)
	t.Parallel()
	runSecCases(t, startSecDev(t, "spawn"), []string{
		"identity", "uids_per_session", "fork_bomb", "memory_bomb", "other_session_files",
		"worker_environment_and_cmdline", "background_processes", "privileges", "system_calls", "descriptors_and_forged_result",
		"signal_worker_and_zygote", "memory_held_past_its_job",
	})
}

// A subset against codexec dev on stdio, as a desktop MCP client starts it:
// one session, the "local" scope.
func TestSecurityDevStdio(t *testing.T) {
	requireSandbox(t)
	t.Parallel()
	runSecCases(t, startSecDevStdio(t), []string{
		"identity", "fork_bomb", "worker_environment_and_cmdline", "network", "background_processes",
		"hard_links_outside", "signal_worker_and_zygote",
	})
}

// The cases where a cluster differs from dev (the worker's environment and
// command line hold NATS and Redis URLs, NATS and Redis listen on the
// loopback, the frontend keeps no files on disk), and a representative
// subset of the rest.
func TestSecurityCluster(t *testing.T) {
	requireSandbox(t)
	t.Parallel()
	runSecCases(t, startSecCluster(t), []string{
		"identity", "uids_per_session", "limits_above_maximum_rejected", "fork_bomb", "memory_bomb", "disk_fill",
		"other_session_files", "worker_environment_and_cmdline", "network", "interpreter_and_environment_read_only",
		"background_processes", "planted_symlinks", "signal_worker_and_zygote",
	})
}

// ---- identity

// Every job runs as an unprivileged uid of its session's own, in its own
// mount, PID, IPC, UTS and network namespaces, with no capabilities, in a
// working directory of mode 0700 that the session's uid owns.
func caseIdentity(t *testing.T, tg *secTarget, s *secSession) {
	id := s.id
	if !sandboxUID(id.UID) || id.EUID != id.UID {
		t.Errorf("the job runs as uid %d euid %d, not a sandbox uid in [%d, +2^24)", id.UID, id.EUID, sandboxUIDBase)
	}
	if f := strings.Fields(id.Status["Uid"]); len(f) != 4 || slices.ContainsFunc(f, func(u string) bool { return u != strconv.Itoa(id.UID) }) {
		t.Errorf("real, effective, saved and filesystem uids differ: Uid: %s", id.Status["Uid"])
	}
	if id.GID == 0 || slices.Contains(strings.Fields(id.Status["Gid"]), "0") || slices.Contains(id.Groups, 0) {
		t.Errorf("the job is in group root: gid %d, Gid: %s, groups %v", id.GID, id.Status["Gid"], id.Groups)
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
		if v, ok := id.Status[k]; !ok || strings.Trim(v, "0") != "" {
			t.Errorf("the job has capabilities: %s: %q", k, v)
		}
	}
	t.Logf("CapBnd %s NoNewPrivs %s Seccomp %s NSpid %s hostname %q", id.Status["CapBnd"], id.Status["NoNewPrivs"], id.Status["Seccomp"], id.Status["NSpid"], id.Hostname)
	worker := tg.workerPIDs()[0]
	for _, n := range []string{"mnt", "pid", "net", "ipc", "uts"} {
		host, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", worker, n))
		if err != nil {
			t.Fatalf("worker's namespaces: %v", err)
		}
		if id.NS[n] == host {
			t.Errorf("the job shares the worker's %s namespace (%s)", n, host)
		}
	}
	if !slices.Equal(id.Ifaces, []string{"lo"}) {
		t.Errorf("the job's network has interfaces %v, want a private loopback only", id.Ifaces)
	}
	if id.CwdMode != 0o700 || id.CwdUID != id.UID {
		t.Errorf("working directory %s: mode %o owner %d, want 0700 owned by the session's uid %d", id.Cwd, id.CwdMode, id.CwdUID, id.UID)
	}
	if s.hostDir == "" {
		t.Errorf("cannot find the session's working directory under the data directories %v", tg.dataDirs)
	} else if f := factsOf(s.hostDir); int(f.uid) != id.UID || f.mode.Perm() != 0o700 {
		t.Errorf("on the host, the session's directory %s is %s; want mode 0700 owned by uid %d", s.hostDir, f, id.UID)
	}
	// The uid is the session's: the same for its next job.
	res, er := s.run(t, identityCode, nil)
	var again identity
	lastJSON(t, res, er, &again)
	if again.UID != id.UID || again.Cwd != id.Cwd {
		t.Errorf("the session's next job runs as uid %d in %s; its first ran as %d in %s", again.UID, again.Cwd, id.UID, id.Cwd)
	}
}

// Two sessions get two uids and two directories; each keeps its own.
func caseUIDsPerSession(t *testing.T, tg *secTarget, s *secSession) {
	o := tg.newSession(t)
	if o.id.UID == s.id.UID {
		t.Errorf("two sessions run as the same uid %d", o.id.UID)
	}
	if !sandboxUID(o.id.UID) {
		t.Errorf("the second session runs as uid %d, not a sandbox uid", o.id.UID)
	}
	if o.hostDir == "" || o.hostDir == s.hostDir {
		t.Errorf("sessions' host directories: %q and %q", s.hostDir, o.hostDir)
	} else if f := factsOf(o.hostDir); int(f.uid) != o.id.UID || f.mode.Perm() != 0o700 {
		t.Errorf("the second session's directory %s is %s; want mode 0700 owned by uid %d", o.hostDir, f, o.id.UID)
	}
	o.assertNoLeftovers(t, "", true)
}

// ---- limits

// limitResult checks that a job stopped on the limit named want.
func limitResult(t *testing.T, res *mcp.CallToolResult, er secResult, want string) {
	t.Helper()
	if !res.IsError || er.Status != "limit" || er.Limit != want {
		t.Errorf("want isError, status \"limit\", limit %q:\n%s", want, dump(res, er))
		return
	}
	if name := strings.ReplaceAll(want, "_", " "); !strings.Contains(strings.ToLower(text(res)), name) && !strings.Contains(text(res), want) {
		t.Errorf("the text does not name the %s limit:\n%s", want, text(res))
	}
}

// A call may not ask for more than the pool's maximums, nor for limits
// that are not positive integers; nothing runs then.
func caseLimitsRejected(t *testing.T, tg *secTarget, s *secSession) {
	bad := []any{
		map[string]any{"memory_mb": 1 << 40}, map[string]any{"cpu_seconds": 1 << 40}, map[string]any{"processes": 1 << 30},
		map[string]any{"file_size_mb": 1 << 40}, map[string]any{"disk_mb": 1 << 40}, map[string]any{"open_files": 1 << 30},
		map[string]any{"memory_mb": 0}, map[string]any{"processes": -1}, map[string]any{"memory_mb": 1.5},
		map[string]any{"memory_mb": "64"}, "memory=1GiB", []any{64},
	}
	for _, lim := range bad {
		res, er := secCall(t, s.c, "execute_code", map[string]any{"code": "print('RAN')", "limits": lim}, 2*time.Minute)
		if !res.IsError || er.Status != "rejected" || strings.Contains(er.Stdout, "RAN") {
			t.Errorf("limits %v: want a rejected error, nothing run:\n%s", lim, dump(res, er))
		}
	}
	// The same for a code file.
	if res, _ := callAs[frontend.FileResult](t, s.c, "initialize_code_file", map[string]any{"content": "print('RAN')\n", "filename": "limits_probe.py"}); res.IsError {
		t.Fatalf("initialize_code_file: %s", text(res))
	}
	res, er := secCall(t, s.c, "execute_code_file", map[string]any{"file_path": "limits_probe.py", "limits": map[string]any{"memory_mb": 1 << 40}}, 2*time.Minute)
	if !res.IsError || er.Status != "rejected" || strings.Contains(er.Stdout, "RAN") {
		t.Errorf("execute_code_file with limits above the maximum: want a rejected error:\n%s", dump(res, er))
	}
}

// peakProcs counts, until stop is closed, the most processes of uid alive
// at once on the host.
func peakProcs(tg *secTarget, uid int, stop <-chan struct{}) <-chan int {
	out := make(chan int, 1)
	go func() {
		peak := 0
		for {
			procs := scanProcs()
			n := 0
			for _, p := range procs {
				if p.hasUID(uid) && tg.ours(procs, p) {
					n++
				}
			}
			peak = max(peak, n)
			select {
			case <-stop:
				out <- peak
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return out
}

// processLimitHolds makes sure, with a bounded number of forks, that
// limits.processes is enforced before a case runs an unbounded bomb: on a
// worker that does not enforce it, the bomb would take the host's pids.
func processLimitHolds(t *testing.T, s *secSession, procs int) {
	t.Helper()
	code := `import os, time
made, pids = 0, []
for i in range(64):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    pids.append(pid)
    made += 1
for p in pids:
    os.waitpid(p, 0)
print('made', made)
`
	res, er := s.run(t, code, &jobOpts{timeout: 30, limits: map[string]int{"processes": procs}})
	m := regexp.MustCompile(`made (\d+)`).FindStringSubmatch(er.Stdout)
	if m == nil {
		t.Fatalf("the bounded fork probe did not report:\n%s", dump(res, er))
	}
	if n, _ := strconv.Atoi(m[1]); n+1 > procs {
		t.Fatalf("limits.processes=%d is not enforced: a job ran %d processes at once; not running an unbounded bomb", procs, n+1)
	}
}

// A fork bomb, after trying to lift its process limit, stays within
// limits.processes, ends with an error, and leaves the session usable.
func caseForkBomb(t *testing.T, tg *secTarget, s *secSession) {
	s.confined(t, "a fork bomb")
	const procs = 16
	processLimitHolds(t, s, procs)
	code := `import os, resource
try:
    resource.setrlimit(resource.RLIMIT_NPROC, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    print('raised RLIMIT_NPROC', flush=True)
except (ValueError, OSError) as e:
    print('cannot raise RLIMIT_NPROC:', e, flush=True)
print('bombing', flush=True)
while True:
    try:
        os.fork()
    except OSError:
        pass
`
	stop := make(chan struct{})
	peak := peakProcs(tg, s.id.UID, stop)
	res, er := s.run(t, code, &jobOpts{timeout: 10, limits: map[string]int{"processes": procs}})
	close(stop)
	if !res.IsError || (er.Status == "limit" && er.Limit != "processes") || (er.Status != "limit" && er.Status != "timeout") {
		t.Errorf("fork bomb: want an error (the processes limit, or the timeout):\n%s", dump(res, er))
	}
	if strings.Contains(er.Stdout, "raised RLIMIT_NPROC") {
		t.Errorf("the job lifted its own process limit:\n%s", dump(res, er))
	}
	// The host's /proc is not read atomically: while the bomb forks and
	// its children die, one scan may see a process that is gone and its
	// successor. The exact check is processLimitHolds's, from inside; this
	// one shows the bomb stayed in the order of its limit.
	if n := <-peak; n > 2*procs {
		t.Errorf("the fork bomb had %d processes alive at once; limits.processes was %d", n, procs)
	} else {
		t.Logf("peak processes of the session: %d (limit %d); result status %q limit %q", n, procs, er.Status, er.Limit)
	}
	s.assertNoLeftovers(t, "", true)
	if res, er := s.run(t, "print(1)", &jobOpts{timeout: 30}); res.IsError || er.Stdout != "1\n" {
		t.Errorf("the session's next job after a fork bomb:\n%s", dump(res, er))
	}
}

// A thread bomb: threads count as processes.
func caseThreadBomb(t *testing.T, tg *secTarget, s *secSession) {
	s.confined(t, "a thread bomb")
	const procs = 16
	processLimitHolds(t, s, procs)
	code := `import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()
        n += 1
except RuntimeError as e:
    print('threads', n, flush=True)
    raise
`
	res, er := s.run(t, code, &jobOpts{timeout: 20, limits: map[string]int{"processes": procs}})
	if !res.IsError || (er.Status == "limit" && er.Limit != "processes") {
		t.Errorf("thread bomb: want an error (the processes limit):\n%s", dump(res, er))
	}
	if m := regexp.MustCompile(`threads (\d+)`).FindStringSubmatch(er.Stdout); m != nil {
		if n, _ := strconv.Atoi(m[1]); n+1 > procs {
			t.Errorf("the job ran %d threads; limits.processes was %d", n+1, procs)
		}
	} else if er.Status != "limit" {
		t.Errorf("the thread bomb neither hit its limit nor said how far it got:\n%s", dump(res, er))
	}
	if res, er := s.run(t, "print(1)", &jobOpts{timeout: 30}); res.IsError || er.Stdout != "1\n" {
		t.Errorf("the session's next job after a thread bomb:\n%s", dump(res, er))
	}
}

// A memory bomb that really touches its pages stops at limits.memory_mb.
func caseMemoryBomb(t *testing.T, tg *secTarget, s *secSession) {
	code := `x = []
for i in range(2048):
    x.append(b'\x01' * (1 << 20))
    if i % 64 == 0:
        print('MiB', i, flush=True)
print('allocated 2 GiB', flush=True)
`
	res, er := s.run(t, code, &jobOpts{timeout: 60, limits: map[string]int{"memory_mb": 128}})
	limitResult(t, res, er, "memory")
	if strings.Contains(er.Stdout, "allocated 2 GiB") {
		t.Errorf("the job allocated 2 GiB under a 128 MiB limit:\n%s", dump(res, er))
	}
}

// The memory limit is the job's, not each process': eight children of
// 100 MiB each do not fit in 256 MiB.
func caseMemoryChildren(t *testing.T, tg *secTarget, s *secSession) {
	tg.needCgroups(t, "a job-wide memory limit")
	code := `import subprocess, sys
child = "import time\nx = b'\\x01' * (100 << 20)\nprint('child holds 100 MiB', flush=True)\ntime.sleep(8)"
ps = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(8)]
codes = [p.wait() for p in ps]
print('children exited with', codes, flush=True)
if all(c == 0 for c in codes):
    print('all children held their memory', flush=True)
`
	res, er := s.run(t, code, &jobOpts{timeout: 60, limits: map[string]int{"memory_mb": 256}})
	if strings.Contains(er.Stdout, "all children held their memory") {
		t.Errorf("8 x 100 MiB children ran under a 256 MiB job limit:\n%s", dump(res, er))
	}
	// The job hit its memory limit (children were killed for it), even
	// if its main process survived: the result says so.
	limitResult(t, res, er, "memory")
}

const fillCode = `chunk = b'\x5a' * (1 << 20)
n = 0
with open(%s, 'wb') as f:
    for i in range(1024):
        f.write(chunk)
        f.flush()
        n += 1
        if i %% 64 == 0:
            print('MiB', i, flush=True)
print('wrote 1 GiB', flush=True)
`

// Filling the working directory stops at limits.disk_mb, the session's
// directory on the host stays small, and the session can clean up and
// go on.
func caseDiskFill(t *testing.T, tg *secTarget, s *secSession) {
	res, er := s.run(t, fmt.Sprintf(fillCode, "'fill.bin'"), &jobOpts{timeout: 90, limits: map[string]int{"disk_mb": 32}})
	limitResult(t, res, er, "disk")
	if strings.Contains(er.Stdout, "wrote 1 GiB") {
		t.Errorf("the job wrote 1 GiB under a 32 MiB disk limit:\n%s", dump(res, er))
	}
	if s.hostDir == "" {
		t.Errorf("cannot find the session's directory on the host to measure it")
	} else if du := diskUsage(s.hostDir); du > 256<<20 {
		t.Errorf("the session's directory %s takes %d MiB on the host after a 32 MiB disk limit", s.hostDir, du>>20)
	} else {
		t.Logf("session directory: %d MiB on the host", du>>20)
	}
	if res, er := s.run(t, "import os\nif os.path.exists('fill.bin'): os.remove('fill.bin')\nprint('clean')", &jobOpts{timeout: 30}); res.IsError || er.Stdout != "clean\n" {
		t.Errorf("the session cannot clean up after a disk limit:\n%s", dump(res, er))
	}
}

// The ways past a sampled disk limit: nesting directories past PATH_MAX,
// where a walk by path names sees nothing, and reserving far more than the
// limit between two samples (fallocate is instant; files of 19 MiB each
// stay under the file size limit that disk_mb implies). Each ends on the
// disk limit, and leaves the session's directory under it (measured by du,
// which walks by descriptors), so that the session's next call does not
// begin over its limit.
func caseDiskRaces(t *testing.T, tg *secTarget, s *secSession) {
	const limit = 20
	for _, c := range []struct{ name, code string }{
		{"nested", `import os
fd = os.open('.', os.O_RDONLY)
for i in range(6000):
    os.mkdir('n' * 200, dir_fd=fd)
    nfd = os.open('n' * 200, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
    with open(os.open('data', os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), 'wb') as f:
        f.write(b'x' * 20000)
print('nested 6000 deep', flush=True)
`},
		{"fallocate", `import errno, os, time
total = 0
try:
    for i in range(40):
        fd = os.open('race-%d' % i, os.O_CREAT | os.O_WRONLY, 0o600)
        os.posix_fallocate(fd, 0, 19 << 20)
        os.close(fd)
        total += 19
except OSError as e:
    print('refused %s after %d MiB' % (errno.errorcode.get(e.errno), total), flush=True)
    raise
print('760 MiB reserved', flush=True)
time.sleep(5)
`},
	} {
		res, er := s.run(t, c.code, &jobOpts{timeout: 90, limits: map[string]int{"disk_mb": limit}})
		t.Logf("%s: status %q limit %q: %s", c.name, er.Status, er.Limit, clip(er.Message, 200))
		limitResult(t, res, er, "disk")
		// Where the worker can give sessions file systems of their own
		// (root, loop devices, mkfs.ext4, as here), the kernel refuses the
		// write at the limit: sampled, the job reserved all 760 MiB.
		if err := diskfs.Check(); c.name == "fallocate" && err == nil && !securityBaseline &&
			!strings.Contains(er.Stdout, "refused ENOSPC after 19 MiB") {
			t.Errorf("fallocate: the kernel did not refuse the write past %d MiB at it; stdout %q", limit, clip(er.Stdout, 300))
		}
		if s.hostDir == "" {
			t.Errorf("cannot find the session's directory on the host to measure it")
			continue
		}
		if du := duBytes(t, s.hostDir); du > limit<<20 {
			t.Errorf("%s: the session's directory %s takes %d MiB on the host after the job, over its %d MiB disk limit", c.name, s.hostDir, du>>20, limit)
		}
		// Refused at the limit, what the job wrote before stays, within
		// it: cleared here, so that the next attack (and case) starts with
		// room.
		clearExcept(t, s.hostDir, s.id.Marker)
	}
}

// clearExcept removes what dir holds but keep.
func clearExcept(t *testing.T, dir, keep string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != keep {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// /tmp is no way around the limits: filling it ends on a limit too.
func caseTmpFill(t *testing.T, tg *secTarget, s *secSession) {
	name := "/tmp/codexec-sec-fill-" + randHex(t, 6) + ".bin"
	t.Cleanup(func() { os.Remove(name) }) // should a worker without a private /tmp have written the host's
	// A private /tmp is a usable one: a few MiB fit.
	usable := fmt.Sprintf("with open(%s, 'wb') as f:\n    for i in range(8):\n        f.write(b'\\x01' * (1 << 20))\nprint('8 MiB in /tmp')", pyStr(name))
	if res, er := s.run(t, usable, &jobOpts{timeout: 60, limits: map[string]int{"disk_mb": 32, "memory_mb": 128}}); res.IsError || !strings.Contains(er.Stdout, "8 MiB in /tmp") {
		t.Errorf("8 MiB in /tmp under disk_mb=32, memory_mb=128:\n%s", dump(res, er))
	}
	res, er := s.run(t, fmt.Sprintf(fillCode, pyStr(name)), &jobOpts{timeout: 90, limits: map[string]int{"disk_mb": 32, "memory_mb": 128}})
	if !res.IsError || (er.Status == "limit" && er.Limit != "memory" && er.Limit != "disk") {
		t.Errorf("filling /tmp: want an error (the memory or disk limit, or a full /tmp):\n%s", dump(res, er))
	}
	t.Logf("filling /tmp: status %q limit %q, last lines %q", er.Status, er.Limit, clip(er.Stdout[max(0, len(er.Stdout)-40):]+er.Stderr[max(0, len(er.Stderr)-80):], 200))
	if strings.Contains(er.Stdout, "wrote 1 GiB") {
		t.Errorf("the job wrote 1 GiB to /tmp under 128 MiB of memory and 32 MiB of disk:\n%s", dump(res, er))
	}
	if _, err := os.Lstat(name); err == nil {
		t.Errorf("the job's /tmp file %s is on the host's /tmp", name)
	}
}

// One file bigger than limits.file_size_mb: CPython ignores SIGXFSZ, so
// the write fails with EFBIG; the worker still names the limit.
func caseFileSize(t *testing.T, tg *secTarget, s *secSession) {
	code := `with open('big.bin', 'wb') as f:
    for i in range(16):
        f.write(b'\x02' * (1 << 20))
        f.flush()
print('wrote 16 MiB', flush=True)
`
	res, er := s.run(t, code, &jobOpts{timeout: 60, limits: map[string]int{"file_size_mb": 8}})
	limitResult(t, res, er, "file_size")
	if strings.Contains(er.Stdout, "wrote 16 MiB") {
		t.Errorf("the job wrote a 16 MiB file under an 8 MiB limit:\n%s", dump(res, er))
	}
	if s.hostDir != "" {
		if f := factsOf(filepath.Join(s.hostDir, "big.bin")); f.size > 8<<20 {
			t.Errorf("big.bin is %d bytes on the host; the limit was 8 MiB", f.size)
		}
	}
	s.run(t, "import os\nif os.path.exists('big.bin'): os.remove('big.bin')", &jobOpts{timeout: 30})
}

// Descriptors beyond limits.open_files.
func caseOpenFiles(t *testing.T, tg *secTarget, s *secSession) {
	code := "fs = []\nfor i in range(4096):\n    fs.append(open('/dev/null'))\nprint('opened', len(fs), flush=True)\n"
	res, er := s.run(t, code, &jobOpts{timeout: 60, limits: map[string]int{"open_files": 64}})
	limitResult(t, res, er, "open_files")
	if strings.Contains(er.Stdout, "opened 4096") {
		t.Errorf("the job opened 4096 files under a limit of 64:\n%s", dump(res, er))
	}
}

// CPU time is its own limit, not the wall-clock timeout.
func caseCPUTime(t *testing.T, tg *secTarget, s *secSession) {
	res, er := s.run(t, "print('spinning', flush=True)\nwhile True:\n    pass\n", &jobOpts{timeout: 60, limits: map[string]int{"cpu_seconds": 2}})
	limitResult(t, res, er, "cpu")
}

// ---- output, signals, timeouts

// An endless flood of output: truncated, bounded, and the session goes on.
func caseOutputFlood(t *testing.T, tg *secTarget, s *secSession) {
	res, er := s.run(t, "while True:\n    print('x' * 10000)\n", &jobOpts{timeout: 3})
	if !res.IsError || !er.StdoutTruncated || len(er.Stdout) > 1<<20 || er.StdoutBytes <= 1<<20 {
		t.Errorf("output flood: want an error with stdout truncated at 1 MiB, got isError=%v status=%q limit=%q truncated=%v len=%d bytes=%d",
			res.IsError, er.Status, er.Limit, er.StdoutTruncated, len(er.Stdout), er.StdoutBytes)
	}
	if n := len(text(res)); n > 3<<20 {
		t.Errorf("the text content is %d bytes", n)
	}
	if !strings.Contains(text(res), "truncated") {
		t.Errorf("no visible truncation marker in the text content")
	}
	t.Logf("output flood: status %q limit %q, %d bytes written, %d kept", er.Status, er.Limit, er.StdoutBytes, len(er.Stdout))
	if res, er := s.run(t, "print(1)", &jobOpts{timeout: 30}); res.IsError || er.Stdout != "1\n" {
		t.Errorf("the session's next job after an output flood:\n%s", dump(res, er))
	}
}

// A busy loop that ignores SIGTERM and friends, with a child in a session
// of its own doing the same: the timeout ends both, promptly.
func caseIgnoresSIGTERM(t *testing.T, tg *secTarget, s *secSession) {
	marker := "codexec-sec-spin-" + randHex(t, 6)
	code := fmt.Sprintf(`import signal, subprocess, sys
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM, signal.SIGXCPU):
    signal.signal(sig, signal.SIG_IGN)
child = "import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass\n"
subprocess.Popen([sys.executable, '-c', child, %s], start_new_session=True)
print('spinning', flush=True)
while True:
    pass
`, pyStr(marker))
	start := time.Now()
	res, er := s.run(t, code, &jobOpts{timeout: 2})
	took := time.Since(start)
	if !res.IsError || er.Status != "timeout" || !strings.Contains(er.Stdout, "spinning") {
		t.Errorf("want status timeout:\n%s", dump(res, er))
	}
	if took > 30*time.Second {
		t.Errorf("a 2 s timeout took %s to come back", took)
	}
	s.assertNoLeftovers(t, marker, true)
}

// ---- the host's secrets

// The host's /etc/shadow never reaches a job, by any path.
func caseShadow(t *testing.T, tg *secTarget, s *secSession) {
	lines := readShadowLines()
	if len(lines) == 0 {
		t.Skip("this host has no readable /etc/shadow to compare with")
	}
	code := `import glob
paths = ['/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/../etc/shadow', '/proc/self/root/etc/shadow', '/proc/1/root/etc/shadow']
paths += glob.glob('/proc/[0-9]*/root/etc/shadow')
for p in paths:
    try:
        print(p, repr(open(p).read()))
    except Exception as e:
        print(p, 'error:', e)
`
	res, er := s.run(t, code, nil)
	all := everything(res, er)
	for _, l := range lines {
		if strings.Contains(all, l) {
			t.Errorf("the host's /etc/shadow reached the job (line %.20q...):\n%s", l, dump(res, er))
			return
		}
	}
}

// Session B cannot read session A's files: not by guessed path, not by
// listing, not by walking the filesystem, not through /proc of A's job
// running at the same time (its cwd, root, open files, environment and
// command line), not in /tmp, not through A's abstract unix socket or
// loopback port; and A cannot open its directory to others.
func caseOtherSession(t *testing.T, tg *secTarget, b *secSession) {
	a := tg.newSession(t)
	if a.id.UID == b.id.UID && sandboxUID(a.id.UID) {
		t.Errorf("sessions a and b run as the same uid %d", a.id.UID)
	}
	name, secret := randHex(t, 6), "SECRET-CONTENT-"+randHex(t, 12)
	setup := fmt.Sprintf(`import os, json
NAME, SECRET = %s, %s
for d in ('.', '/tmp', '/dev/shm', '/var/tmp'):
    try:
        with open(os.path.join(d, 'secret-' + NAME + '.txt'), 'w') as f:
            f.write(SECRET)
        os.chmod(os.path.join(d, 'secret-' + NAME + '.txt'), 0o666)
    except OSError as e:
        print('cannot write in', d, e)
# Try to let others in.
os.chmod('.', 0o777)
print(json.dumps({'cwd': os.getcwd()}))
`, pyStr(name), pyStr(secret))
	res, er := a.run(t, setup, nil)
	if res.IsError {
		t.Fatalf("session a's setup:\n%s", dump(res, er))
	}
	t.Cleanup(func() { os.Remove("/var/tmp/secret-" + name + ".txt") })

	hold := fmt.Sprintf(`import os, socket, subprocess, sys, threading, time
NAME, SECRET = %s, %s
held = open('secret-' + NAME + '.txt')
u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
u.bind('\0codexec-secret-' + NAME)
u.listen(8)
s = socket.socket()
s.bind(('127.0.0.1', 0))
s.listen(8)
def serve(sock):
    while True:
        try:
            c, _ = sock.accept()
        except OSError:
            return
        try:
            c.sendall(SECRET.encode())
        finally:
            c.close()
for sock in (u, s):
    threading.Thread(target=serve, args=(sock,), daemon=True).start()
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(90)', SECRET], env={'SECRET_ENV': SECRET})
with open('ready-' + NAME + '.tmp', 'w') as r:
    r.write(str(s.getsockname()[1]))
os.rename('ready-' + NAME + '.tmp', 'ready-' + NAME)
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists('done-' + NAME):
    time.sleep(0.1)
child.kill()
child.wait()
print('held', flush=True)
`, pyStr(name), pyStr(secret))
	type result struct {
		res *mcp.CallToolResult
		er  secResult
	}
	held := make(chan result, 1)
	go func() {
		// Not a.run: t.Fatal may not be called from this goroutine.
		args := map[string]any{"code": hold, "timeout_seconds": 90}
		res, err := a.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "execute_code", Arguments: args}})
		var er secResult
		if err == nil && res.StructuredContent != nil {
			raw, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(raw, &er)
		} else if err != nil {
			er.Message = "call failed: " + err.Error()
			res = &mcp.CallToolResult{IsError: true}
		}
		held <- result{res, er}
	}()
	// Wait until a's job is running and holds the file.
	port := 0
	if a.hostDir != "" {
		deadline := time.Now().Add(90 * time.Second)
		for {
			if b, err := os.ReadFile(filepath.Join(a.hostDir, "ready-"+name)); err == nil {
				port, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session a's job did not start within 90 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		t.Errorf("cannot find session a's directory on the host: probing blind after 3 s")
		time.Sleep(3 * time.Second)
	}

	roots := append(slices.Clone(tg.dataDirs), filepath.Dir(a.id.Cwd), "/tmp", "/var/tmp", "/dev/shm", "/run", "/home", "/root", "/srv", "/mnt", "/media", "/opt", "/var/lib", "/var/spool")
	if a.hostDir != "" {
		roots = append(roots, filepath.Dir(a.hostDir))
	}
	probe := fmt.Sprintf(`import glob, json, os, socket, stat, time
NAME, ACWD, AHOST, PORT, ROOTS = %s, %s, %s, %d, %s
TOKEN = ''.join(['SEC', 'RET-CON', 'TENT-']).encode()
SECRET_NAME = 'secret-' + NAME + '.txt'
found, report, read = [], {}, 0
def grab(how, path):
    global read
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return
        with open(path, 'rb') as f:
            data = f.read(8 << 20)
    except Exception:
        return
    read += 1
    i = data.find(TOKEN)
    if i >= 0:
        found.append([how, path, data[i:i + 64].decode('latin1')])
me = os.path.realpath(os.getcwd())
for label, d in (('a_cwd', ACWD), ('a_host_dir', AHOST)):
    if not d:
        continue
    other = os.path.realpath(d) != me
    report[label + ' exists'] = other and os.path.exists(d)
    report[label + ' secret exists'] = other and os.path.exists(os.path.join(d, SECRET_NAME))
    grab('guessed path ' + label, os.path.join(d, SECRET_NAME))
    for what, q in (('', d), (' parent', os.path.dirname(d))):
        try:
            report['listing of ' + label + what] = sorted(os.listdir(q))[:300]
        except Exception as e:
            report['listing of ' + label + what] = 'error: ' + str(e)
deadline, walked = time.time() + 20, 0
for root in ROOTS:
    for dirpath, dirnames, filenames in os.walk(root):
        if time.time() > deadline or walked > 50000:
            break
        for fn in filenames:
            walked += 1
            p = os.path.join(dirpath, fn)
            if fn == SECRET_NAME and os.path.realpath(dirpath) != me:
                found.append(['file name seen in a walk', p, ''])
            if not os.path.islink(p):
                grab('walk', p)
pids = [p for p in os.listdir('/proc') if p.isdigit()]
report['pids visible'] = len(pids)
for pid in pids:
    base = '/proc/' + pid
    for what in ('environ', 'cmdline'):
        grab('/proc/PID/' + what, base + '/' + what)
    for rel in ('/cwd/' + SECRET_NAME, '/root' + ACWD + '/' + SECRET_NAME, '/root' + AHOST + '/' + SECRET_NAME, '/root/tmp/' + SECRET_NAME):
        grab('/proc/PID' + rel.split(SECRET_NAME)[0], base + rel)
    if int(pid) != os.getpid():
        try:
            fds = os.listdir(base + '/fd')
        except Exception:
            fds = []
        for fd in fds:
            grab('/proc/PID/fd', base + '/fd/' + fd)
try:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(3)
    c.connect('\0codexec-secret-' + NAME)
    found.append(['abstract unix socket', NAME, c.recv(64).decode('latin1')])
except Exception as e:
    report['abstract unix socket'] = 'error: ' + str(e)
try:
    report['abstract socket in /proc/net/unix'] = ('codexec-secret-' + NAME) in open('/proc/net/unix').read()
except Exception as e:
    report['abstract socket in /proc/net/unix'] = 'error: ' + str(e)
if PORT:
    try:
        c = socket.create_connection(('127.0.0.1', PORT), timeout=3)
        found.append(['loopback port', str(PORT), c.recv(64).decode('latin1')])
    except Exception as e:
        report['loopback port'] = 'error: ' + str(e)
try:
    report['/tmp'] = sorted(os.listdir('/tmp'))[:100]
except Exception as e:
    report['/tmp'] = 'error: ' + str(e)
report['files read'], report['files walked'], report['found'] = read, walked, found
print(json.dumps(report))
`, pyStr(name), pyStr(a.id.Cwd), pyStr(a.hostDir), port, pyList(roots))
	pres, per := b.run(t, probe, &jobOpts{timeout: 90})
	if a.hostDir != "" {
		if err := os.WriteFile(filepath.Join(a.hostDir, "done-"+name), nil, 0o644); err != nil {
			t.Errorf("release a's job: %v", err)
		}
	}
	var h result
	select {
	case h = <-held:
	case <-time.After(2 * time.Minute):
		t.Fatal("session a's holding job did not come back")
	}
	if h.res.IsError || !strings.Contains(h.er.Stdout, "held") {
		t.Errorf("session a's holding job failed, so b's probe did not run beside it:\n%s", dump(h.res, h.er))
	}

	if pres.IsError {
		t.Errorf("b's probe failed:\n%s", dump(pres, per))
	}
	if strings.Contains(everything(pres, per), secret) {
		t.Errorf("session b read session a's secret:\n%s", dump(pres, per))
	}
	var report map[string]any
	lastJSON(t, pres, per, &report)
	if found, _ := report["found"].([]any); len(found) > 0 {
		t.Errorf("session b reached session a's data:\n%s", clip(fmt.Sprint(found), 4000))
	}
	for _, k := range []string{"a_cwd exists", "a_cwd secret exists", "a_host_dir exists", "a_host_dir secret exists", "abstract socket in /proc/net/unix"} {
		if report[k] == true {
			t.Errorf("session b sees session a's: %s", k)
		}
	}
	if a.hostDir != "" {
		for k, v := range report {
			if l, ok := v.([]any); ok && strings.HasPrefix(k, "listing of") && slices.Contains(l, any(filepath.Base(a.hostDir))) {
				t.Errorf("session b lists session a's directory (%s): %v", k, clip(fmt.Sprint(l), 500))
			}
		}
	}
	if l, ok := report["/tmp"].([]any); ok && slices.Contains(l, any("secret-"+name+".txt")) {
		t.Errorf("session b sees session a's /tmp: %v", l)
	}
	t.Logf("b's probe: %d pids visible, %v files walked, %v read", int(toFloat(report["pids visible"])), report["files walked"], report["files read"])
	a.assertNoLeftovers(t, secret, true)
}

func toFloat(v any) float64 { f, _ := v.(float64); return f }

// The worker's environment and command line (canaries, NATS and Redis
// URLs) reach no job, through any /proc file or its own environment.
func caseWorkerEnv(t *testing.T, tg *secTarget, s *secSession) {
	code := `import glob, json, os
KEYS = [b'canary', b'nats://', b'redis://', b'secret', b'aws_']
hits, read = [], 0
def scan(path):
    global read
    try:
        with open(path, 'rb') as f:
            data = f.read()
    except Exception:
        return
    read += 1
    for item in data.split(b'\0'):
        if any(k in item.lower() for k in KEYS):
            hits.append([path, item[:300].decode('latin1')])
paths = ['/proc/1/environ', '/proc/self/environ', '/proc/1/cmdline', '/proc/self/cmdline',
         '/proc/%d/environ' % os.getppid(), '/proc/%d/cmdline' % os.getppid()]
paths += sorted(glob.glob('/proc/[0-9]*/environ')) + sorted(glob.glob('/proc/[0-9]*/cmdline'))
paths += sorted(glob.glob('/proc/[0-9]*/task/[0-9]*/environ')) + sorted(glob.glob('/proc/[0-9]*/task/[0-9]*/cmdline'))
for p in paths:
    scan(p)
for k, v in os.environ.items():
    if any(x in (k + '=' + v).lower().encode() for x in KEYS):
        hits.append(['os.environ', k + '=' + v])
print(json.dumps({'read': read, 'pids': len(glob.glob('/proc/[0-9]*')), 'environ': sorted(os.environ), 'hits': hits}))
`
	res, er := s.run(t, code, nil)
	if res.IsError {
		t.Fatalf("job failed:\n%s", dump(res, er))
	}
	all := everything(res, er)
	for _, c := range tg.canaries {
		if strings.Contains(all, c) {
			t.Errorf("the worker's %q reached the job:\n%s", c, dump(res, er))
		}
	}
	var out struct {
		Read, PIDs int
		Environ    []string
		Hits       [][]string
	}
	lastJSON(t, res, er, &out)
	if len(out.Hits) > 0 {
		t.Errorf("the job found the worker's settings: %v", out.Hits)
	}
	t.Logf("read %d /proc files of %d pids; job environment %v", out.Read, out.PIDs, out.Environ)
}

// network none: no job reaches the host's loopback services (the MCP
// endpoint, which would let it call tools; NATS; Redis; a listener of this
// test), the host's own address, or the internet.
func caseNetwork(t *testing.T, tg *secTarget, s *secSession) {
	loop, wild := newTrap(t, "127.0.0.1:0"), newTrap(t, "0.0.0.0:0")
	targets := map[string][2]any{
		"test listener on loopback":   {"127.0.0.1", loop.port()},
		"test listener on all (lo)":   {"127.0.0.1", wild.port()},
		"test listener on localhost":  {"localhost", loop.port()},
		"public host by name":         {"pypi.org", 443},
		"public host by address":      {"1.1.1.1", 443},
		"public DNS server over TCP":  {"8.8.8.8", 53},
		"link-local metadata service": {"169.254.169.254", 80},
	}
	if ip := hostIPv4(); ip != "" {
		targets["test listener on the host's address"] = [2]any{ip, wild.port()}
	}
	for name, port := range tg.ports {
		targets[name+" on loopback"] = [2]any{"127.0.0.1", port}
	}
	tj, _ := json.Marshal(targets)
	code := fmt.Sprintf(`import json, socket
T = json.loads(%s)
out = {}
for name, (host, port) in sorted(T.items()):
    try:
        c = socket.create_connection((host, port), timeout=3)
        out[name] = 'CONNECTED to %%s' %% (c.getpeername(),)
        c.close()
    except Exception as e:
        out[name] = type(e).__name__ + ': ' + str(e)
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b'x', ('8.8.8.8', 53))
    out['udp datagram out'] = 'SENT'
except Exception as e:
    out['udp datagram out'] = type(e).__name__ + ': ' + str(e)
print(json.dumps(out))
`, pyStr(string(tj)))
	res, er := s.run(t, code, &jobOpts{timeout: 120})
	if res.IsError {
		t.Fatalf("job failed:\n%s", dump(res, er))
	}
	var out map[string]string
	lastJSON(t, res, er, &out)
	for name, v := range out {
		if strings.HasPrefix(v, "CONNECTED") || v == "SENT" {
			t.Errorf("%s: %s", name, v)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if c := append(loop.connections(), wild.connections()...); len(c) > 0 {
		t.Errorf("the test's listeners got connections from %v", c)
	}
	t.Logf("attempts: %v", out)
}

// network none, in a warm interpreter: the jobs of one session share a
// loopback (a network namespace per session), another session's jobs never
// reach it. Session a's job listens on 127.0.0.1; b's job, running beside
// it, cannot connect; a's second job can.
func caseLoopbackPerSession(t *testing.T, tg *secTarget, b *secSession) {
	if !tg.zygote {
		t.Skip("each job of a fresh interpreter has a network namespace of its own")
	}
	// The first jobs of an environment run in fresh interpreters while its
	// zygote starts: the case is about the zygote's jobs.
	waitForZygote(t, tg.logs)
	a := tg.newSession(t)
	name, token := randHex(t, 6), "LOOPBACK-TOKEN-"+randHex(t, 12)
	hold := fmt.Sprintf(`import os, socket, time
NAME, TOKEN = %s, %s
s = socket.socket()
s.bind(('127.0.0.1', 0))
s.listen(8)
s.settimeout(0.1)
with open('port-' + NAME + '.tmp', 'w') as f:
    f.write(str(s.getsockname()[1]))
os.rename('port-' + NAME + '.tmp', 'port-' + NAME)
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists('done-' + NAME):
    try:
        c, _ = s.accept()
    except OSError:
        continue
    c.sendall(TOKEN.encode())
    c.close()
print('held', flush=True)
`, pyStr(name), pyStr(token))
	held := make(chan secResult, 1)
	go func() {
		// Not a.run: t.Fatal may not be called from this goroutine.
		args := map[string]any{"code": hold, "timeout_seconds": 90}
		res, err := a.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "execute_code", Arguments: args}})
		var er secResult
		if err == nil && res.StructuredContent != nil {
			raw, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(raw, &er)
		} else if err != nil {
			er.Message = "call failed: " + err.Error()
		}
		held <- er
	}()
	// a's second job waits for the port in the session's directory and
	// connects; it leaves the port for the test to hand to b.
	res, er := a.run(t, fmt.Sprintf(`import json, os, socket, time
NAME = %s
deadline = time.time() + 60
while not os.path.exists('port-' + NAME) and time.time() < deadline:
    time.sleep(0.05)
port = int(open('port-' + NAME).read())
try:
    c = socket.create_connection(('127.0.0.1', port), timeout=3)
    got = c.recv(64).decode('latin1')
except Exception as e:
    got = 'error: ' + type(e).__name__ + ': ' + str(e)
print(json.dumps({'port': port, 'got': got}))
`, pyStr(name)), &jobOpts{timeout: 90})
	var mine struct {
		Port int    `json:"port"`
		Got  string `json:"got"`
	}
	lastJSON(t, res, er, &mine)
	if mine.Got != token {
		t.Errorf("session a's second job did not reach its first job's loopback listener: %q", mine.Got)
	}
	pres, per := b.run(t, fmt.Sprintf(`import socket
try:
    c = socket.create_connection(('127.0.0.1', %d), timeout=3)
    print('CONNECTED', c.recv(64).decode('latin1'))
except Exception as e:
    print('error:', type(e).__name__, e)
`, mine.Port), nil)
	if rres, rer := a.run(t, fmt.Sprintf("open('done-' + %s, 'w').close()", pyStr(name)), nil); rres.IsError {
		t.Errorf("release a's job:\n%s", dump(rres, rer))
	}
	select {
	case h := <-held:
		if !strings.Contains(h.Stdout, "held") {
			t.Errorf("session a's listening job failed, so b's attempt did not run beside it: %+v", h)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("session a's listening job did not come back")
	}
	if out := everything(pres, per); strings.Contains(out, "CONNECTED") || strings.Contains(out, token) {
		t.Errorf("session b reached session a's loopback listener:\n%s", dump(pres, per))
	} else if !strings.Contains(out, "error:") {
		t.Errorf("session b's attempt did not run:\n%s", dump(pres, per))
	}
	t.Logf("a's second job got %q; b's attempt: %s", mine.Got, strings.TrimSpace(per.Stdout))
	a.assertNoLeftovers(t, token, true)
}

// The interpreter and the environment are read-only: writes fail inside,
// and the host's files are the same afterwards.
func caseReadOnlyEnv(t *testing.T, tg *secTarget, s *secSession) {
	res, er := s.run(t, `import json, os, site, sys, sysconfig
p = sysconfig.get_paths()
print(json.dumps({'executable': sys.executable, 'real': os.path.realpath(sys.executable), 'prefix': sys.prefix,
    'base_prefix': sys.base_prefix, 'site': site.getsitepackages(), 'stdlib': p['stdlib'], 'purelib': p['purelib'],
    'platlib': p['platlib'], 'os': os.__file__}))
`, nil)
	var paths struct {
		Exe                          string   `json:"executable"`
		RealExe                      string   `json:"real"`
		Pfx                          string   `json:"prefix"`
		Base                         string   `json:"base_prefix"`
		Site                         []string `json:"site"`
		Stdlib, Purelib, Platlib, OS string
	}
	lastJSON(t, res, er, &paths)
	probe := "codexec-probe-" + randHex(t, 6)
	watch := []string{paths.Exe, paths.RealExe, filepath.Join(paths.Pfx, "pyvenv.cfg"), paths.OS, paths.Stdlib, paths.Purelib, paths.Platlib,
		filepath.Dir(paths.Exe), filepath.Join(paths.Base, "bin"), paths.Pfx, paths.Base}
	watch = append(watch, paths.Site...)
	var cleanup []string
	for _, d := range append(slices.Clone(paths.Site), paths.Stdlib, filepath.Dir(paths.Exe), filepath.Join(paths.Base, "bin"), "/usr/bin", "/usr/local/bin", "/usr/lib", "/etc", "/opt", "/", "/var/tmp", "/var/lib", "/home") {
		cleanup = append(cleanup, filepath.Join(d, probe), filepath.Join(d, probe+".pth"), filepath.Join(d, strings.ReplaceAll(probe, "-", "_")+".py"))
	}
	t.Cleanup(func() {
		for _, p := range cleanup {
			os.Remove(p)
		}
	})
	for _, p := range watch {
		if _, err := os.Lstat(p); err != nil {
			t.Logf("%s is not on the host (%v): not compared", p, err)
		}
	}
	before := snap(watch...)

	code := fmt.Sprintf(`import json, os, site, sys, sysconfig
PROBE = %s
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = 'OK'
    except Exception as e:
        out[name] = 'denied: ' + type(e).__name__ + ': ' + str(e)
def create(path):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
def same_mode(path):
    os.chmod(path, os.stat(path).st_mode & 0o7777)
def same_times(path):
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
real = os.path.realpath(sys.executable)
attempt('env: open sys.executable for append', lambda: open(sys.executable, 'ab').close())
attempt('env: open the real interpreter for append', lambda: open(real, 'ab').close())
attempt('env: chmod the real interpreter', lambda: same_mode(real))
attempt('env: utime the real interpreter', lambda: same_times(real))
attempt('env: open pyvenv.cfg for append', lambda: open(os.path.join(sys.prefix, 'pyvenv.cfg'), 'ab').close())
attempt('env: open os.py for append', lambda: open(os.__file__, 'ab').close())
for i, d in enumerate(site.getsitepackages()):
    attempt('env: .pth file in site-packages %%d' %% i, lambda: create(os.path.join(d, PROBE + '.pth')))
    attempt('env: chmod site-packages %%d' %% i, lambda: same_mode(d))
attempt('env: module in the stdlib', lambda: create(os.path.join(sysconfig.get_paths()['stdlib'], PROBE.replace('-', '_') + '.py')))
attempt('env: file in the environment bin', lambda: create(os.path.join(os.path.dirname(sys.executable), PROBE)))
attempt('env: file in the base interpreter bin', lambda: create(os.path.join(sys.base_prefix, 'bin', PROBE)))
# The copies of the scripts the worker keeps are its record of what ran.
attempt('env: file next to the job\'s script', lambda: create(os.path.join(os.path.dirname(os.path.abspath(__file__)), PROBE)))
attempt('env: append to the job\'s own script', lambda: open(os.path.abspath(__file__), 'ab').close())
for d in ('/usr/bin', '/usr/local/bin', '/usr/lib', '/etc', '/opt', '/', '/var/tmp', '/var/lib', '/home'):
    attempt('host: file in ' + d, lambda: create(os.path.join(d, PROBE)))
print(json.dumps(out))
`, pyStr(probe))
	res, er = s.run(t, code, nil)
	var out map[string]string
	lastJSON(t, res, er, &out)
	for name, v := range out {
		if strings.HasPrefix(name, "env:") && !strings.HasPrefix(v, "denied") {
			t.Errorf("%s: succeeded", name)
		}
	}
	for _, p := range cleanup {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("the job created %s on the host", p)
		}
	}
	before.assertUnchanged(t, "after the job tried to write the interpreter and the environment")
	t.Logf("attempts: %v", out)
}

// Processes left running on purpose (a new session, a nohup-style child
// ignoring SIGHUP and SIGTERM, a double-forked daemon writing a file every
// 100 ms) are all gone once the result is back, and the daemon's file
// stops growing.
func caseBackground(t *testing.T, tg *secTarget, s *secSession) {
	marker := "codexec-sec-bg-" + randHex(t, 6)
	code := fmt.Sprintf(`import os, signal, subprocess, sys, time
M = %s
subprocess.Popen(['sleep', '1000'], start_new_session=True)
ign = "import signal, time\nfor s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):\n    signal.signal(s, signal.SIG_IGN)\ntime.sleep(1000)\n"
subprocess.Popen([sys.executable, '-c', ign, M])
subprocess.Popen([sys.executable, '-c', ign, M], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        for s in (signal.SIGHUP, signal.SIGTERM, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open('daemon-' + M + '.log', 'a') as f:
            while True:
                f.write('x\n')
                f.flush()
                time.sleep(0.1)
    os._exit(0)
os.waitpid(pid, 0)
time.sleep(0.5)
print('spawned', flush=True)
`, pyStr(marker))
	res, er := s.run(t, code, &jobOpts{timeout: 30})
	if res.IsError || !strings.Contains(er.Stdout, "spawned") {
		t.Errorf("the job failed:\n%s", dump(res, er))
	}
	s.assertNoLeftovers(t, marker, true)
	if s.hostDir == "" {
		t.Errorf("cannot find the session's directory on the host to watch the daemon's file")
		return
	}
	log := filepath.Join(s.hostDir, "daemon-"+marker+".log")
	first := factsOf(log)
	if !first.exists {
		t.Logf("the daemon's file %s never appeared", log)
		return
	}
	time.Sleep(time.Second)
	if again := factsOf(log); again.size != first.size {
		t.Errorf("the daemon's file grew from %d to %d bytes after the job ended", first.size, again.size)
	}
}

// Links planted in the working directory, pointing outside it, are never
// followed by the worker or the frontend: the targets stay as they were
// and their contents appear in no tool output.
func caseSymlinks(t *testing.T, tg *secTarget, s *secSession) {
	o := tg.newSession(t)
	victimDir := t.TempDir()
	victim := filepath.Join(victimDir, "victim.txt")
	victimContent := "VICTIM-" + randHex(t, 8)
	if err := os.WriteFile(victim, []byte(victimContent), 0o600); err != nil {
		t.Fatal(err)
	}
	watch := []string{victim, victimDir, "/etc/passwd", "/etc/shadow"}
	if o.hostDir != "" {
		watch = append(watch, o.hostDir)
	}
	before := snap(watch...)
	ownersBefore := snap(append(slices.Clone(tg.dataDirs), filepath.Join(tg.dataDirs[0], "state.db"), filepath.Join(tg.dataDirs[0], "scripts"), filepath.Join(tg.dataDirs[0], "sessions"))...)

	links := map[string]string{
		"passwd-link.py": "/etc/passwd", "victim-link.py": victim, "evil.py": victim, "main.py": victim, "linked.py": victim,
		"victim-dir": victimDir, "files": victimDir, "scripts": victimDir, ".tmp": victimDir, "tmp": victimDir,
		".cache": victimDir, ".local": victimDir, ".config": victimDir, "data-dir": tg.dataDirs[0],
		"state-db": filepath.Join(tg.dataDirs[0], "state.db"), "other-session": o.hostDir, "other-session-cwd": o.id.Cwd,
		"rootfs": "/", "loop": "loop",
	}
	lj, _ := json.Marshal(links)
	plant := fmt.Sprintf(`import json, os
L = json.loads(%s)
out = {}
for name, target in sorted(L.items()):
    if not target:
        continue
    try:
        if os.path.lexists(name):
            os.remove(name)
        os.symlink(target, name)
        out[name] = 'planted'
    except OSError as e:
        out[name] = 'error: ' + str(e)
# And next to the scripts the worker keeps, and the code files' on-disk copies.
here = os.path.dirname(os.path.abspath(__file__))
for d in (here, os.path.join(here, 'files')):
    for name in ('victim-link.py', 'linked.py', 'files'):
        try:
            os.symlink(L['victim-link.py'], os.path.join(d, name))
            out[d + '/' + name] = 'planted'
        except OSError as e:
            out[d + '/' + name] = 'error: ' + str(e)
print(json.dumps(out))
`, pyStr(string(lj)))
	res, er := s.run(t, plant, nil)
	if res.IsError {
		t.Fatalf("planting the links failed:\n%s", dump(res, er))
	}
	t.Logf("plant: %s", strings.TrimSpace(er.Stdout))

	var outputs []string
	record := func(what string, res *mcp.CallToolResult, er secResult) {
		outputs = append(outputs, what+":\n"+everything(res, er))
	}
	for _, fn := range []string{"evil.py", "victim-link.py", "passwd-link.py", "main.py"} {
		res, er := s.run(t, "print('ran')", &jobOpts{timeout: 30, extra: map[string]any{"filename": fn}})
		record("execute_code filename="+fn, res, er)
		if res.IsError || er.Stdout != "ran\n" {
			t.Errorf("execute_code with filename %s:\n%s", fn, dump(res, er))
		}
	}
	res, fr := callAs[frontend.FileResult](t, s.c, "initialize_code_file", map[string]any{"content": "print('init')\n", "filename": "linked.py"})
	outputs = append(outputs, "initialize_code_file: "+text(res))
	if res.IsError {
		t.Errorf("initialize_code_file linked.py: %s", text(res))
	}
	res, _ = callAs[frontend.FileResult](t, s.c, "append_to_code_file", map[string]any{"file_path": "linked.py", "content": "print('more')\n"})
	outputs = append(outputs, "append_to_code_file: "+text(res))
	res, _ = callAs[frontend.FileResult](t, s.c, "read_code_file", map[string]any{"file_path": "linked.py"})
	outputs = append(outputs, "read_code_file linked.py: "+text(res))
	if text(res) != "print('init')\nprint('more')\n" {
		t.Errorf("read_code_file linked.py: %q", text(res))
	}
	for _, p := range []string{"victim-link.py", "passwd-link.py", "evil.py", "main.py", filepath.Join(s.id.Cwd, "victim-link.py"), fr.FilePath} {
		if p == "" {
			continue
		}
		res, _ := callAs[frontend.FileResult](t, s.c, "read_code_file", map[string]any{"file_path": p})
		outputs = append(outputs, "read_code_file "+p+": "+text(res))
		cres, cer := secCall(t, s.c, "execute_code_file", map[string]any{"file_path": p, "timeout_seconds": 30}, 2*time.Minute)
		record("execute_code_file "+p, cres, cer)
	}
	// A job after all that: whatever the worker does to the working
	// directory before and after a job, it does with the links in place.
	res, er = s.run(t, "import os\nprint(sorted(os.listdir('.')))", &jobOpts{timeout: 60})
	record("listing", res, er)
	if res.IsError {
		t.Errorf("a job after the links were planted:\n%s", dump(res, er))
	}
	passwd, _ := os.ReadFile("/etc/passwd")
	rootLine := ""
	if l, _, ok := strings.Cut(string(passwd), "\n"); ok && strings.HasPrefix(l, "root:") {
		rootLine = l
	}
	for _, out := range outputs {
		if strings.Contains(out, victimContent) || (rootLine != "" && strings.Contains(out, rootLine)) {
			t.Errorf("a tool output holds the target of a planted link:\n%s", clip(out, 4000))
		}
	}
	before.assertUnchanged(t, "after links were planted")
	ownersBefore.assertSameOwner(t, "after links were planted")
	// Remove the links, so that later cases walk a plain directory.
	s.run(t, fmt.Sprintf("import json, os\nfor n in json.loads(%s):\n    if os.path.islink(n):\n        os.remove(n)", pyStr(string(lj))), &jobOpts{timeout: 30})
}

// readableVictim writes a file of the host that every user may read, in a
// directory every user may enter (t.TempDir's is private), for a job to try
// to change; it returns the file and its directory.
func readableVictim(t *testing.T) (file, dir string) {
	dir = t.TempDir()
	file = filepath.Join(dir, "victim.txt")
	if err := os.WriteFile(file, []byte("victim"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return file, dir
}

// Hard links to files outside the working directory cannot be made (with
// one, a later chown or chmod of the session's files would reach the
// host's).
func caseHardLinks(t *testing.T, tg *secTarget, s *secSession) {
	victim, _ := readableVictim(t)
	res, er := s.run(t, `import json, os, sys
print(os.path.realpath(sys.executable))`, nil)
	realExe := strings.TrimSpace(er.Stdout)
	targets := map[string]string{"passwd": "/etc/passwd", "shadow": "/etc/shadow", "python": realExe, "victim": victim}
	var paths []string
	for _, p := range targets {
		paths = append(paths, p)
	}
	before := snap(paths...)
	// The worker's database changes all the time: only its owner, mode
	// and link count must not.
	db := filepath.Join(tg.dataDirs[0], "state.db")
	targets["state-db"] = db
	dbBefore := factsOf(db)
	tj, _ := json.Marshal(targets)
	res, er = s.run(t, fmt.Sprintf(`import json, os
out = {}
for name, target in sorted(json.loads(%s).items()):
    try:
        os.link(target, 'hl-' + name)
        out[name] = 'LINKED'
    except Exception as e:
        out[name] = 'denied: ' + str(e)
print(json.dumps(out))
`, pyStr(string(tj))), nil)
	var out map[string]string
	lastJSON(t, res, er, &out)
	for name, v := range out {
		if name == "state-db" && !dbBefore.exists {
			continue
		}
		if !strings.HasPrefix(v, "denied") {
			t.Errorf("hard link to %s (%s): %s", name, targets[name], v)
		}
	}
	// The next job runs with whatever links were made in place.
	if res, er := s.run(t, "print(1)", &jobOpts{timeout: 30}); res.IsError {
		t.Errorf("the next job:\n%s", dump(res, er))
	}
	before.assertUnchanged(t, "after the job tried to hard-link them")
	if now := factsOf(db); dbBefore.exists && (now.uid != dbBefore.uid || now.mode != dbBefore.mode || now.nlink != dbBefore.nlink) {
		t.Errorf("the worker's database changed owner, mode or links:\n  before %s\n  after  %s", dbBefore, now)
	}
	s.run(t, "import glob, os\nfor p in glob.glob('hl-*'):\n    os.remove(p)", &jobOpts{timeout: 30})
}

// No way up: setuid, setgid, mount, chroot, ptrace of the parent and of
// pid 1, raw devices, kernel logs and memory, the host name, sysrq,
// device nodes, raising the hard process limit; setuid binaries cannot
// elevate (no_new_privs, or nosuid mounts).
func casePrivileges(t *testing.T, tg *secTarget, s *secSession) {
	s.confined(t, "privilege escalation attempts (sysrq, ptrace, mount)")
	hostname, _ := os.Hostname()
	code := `import ctypes, json, os, resource, socket, stat
libc = ctypes.CDLL(None, use_errno=True)
out, info = {}, {}
def attempt(name, fn):
    try:
        r = fn()
        out[name] = 'OK %r' % (r,)
    except Exception as e:
        out[name] = 'denied: ' + type(e).__name__ + ': ' + str(e)
def check(r):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return r
os.makedirs('mnt', exist_ok=True)
attempt('setuid(0)', lambda: os.setuid(0))
attempt('setgid(0)', lambda: os.setgid(0))
attempt('setresuid(0)', lambda: os.setresuid(0, 0, 0))
attempt('setgroups([0])', lambda: os.setgroups([0]))
attempt('mount tmpfs', lambda: check(libc.mount(b'none', b'mnt', b'tmpfs', 0, None)))
attempt('mount proc', lambda: check(libc.mount(b'proc', b'mnt', b'proc', 0, None)))
attempt('chroot', lambda: os.chroot('mnt'))
attempt('sethostname', lambda: socket.sethostname('pwned'))
attempt('ptrace attach parent', lambda: check(libc.ptrace(16, os.getppid(), None, None)))
attempt('ptrace attach pid 1', lambda: check(libc.ptrace(16, 1, None, None)))
attempt('open /proc/1/mem', lambda: os.close(os.open('/proc/1/mem', os.O_RDONLY)))
attempt('open /proc/sysrq-trigger', lambda: open('/proc/sysrq-trigger', 'w').close())
attempt('open /proc/sys/kernel/hostname', lambda: open('/proc/sys/kernel/hostname', 'w').close())
attempt('read /dev/kmsg', lambda: open('/dev/kmsg', 'rb').read(1))
attempt('read /proc/kcore', lambda: open('/proc/kcore', 'rb').read(1))
attempt('read /dev/mem', lambda: open('/dev/mem', 'rb').read(1))
attempt('mknod block device', lambda: os.mknod('sda-node', 0o600 | stat.S_IFBLK, os.makedev(8, 0)))
attempt('mknod char device', lambda: os.mknod('mem-node', 0o600 | stat.S_IFCHR, os.makedev(1, 1)))
soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
info['RLIMIT_NPROC'] = [soft, hard]
if hard != resource.RLIM_INFINITY:
    attempt('raise RLIMIT_NPROC', lambda: resource.setrlimit(resource.RLIMIT_NPROC, (hard + 1000, hard + 1000)))
status = open('/proc/self/status').read()
info['no_new_privs'] = 'NoNewPrivs:\t1' in status
info['usr_nosuid'] = bool(os.statvfs('/usr/bin').f_flag & os.ST_NOSUID)
# user namespaces: informational (capabilities there are scoped to it)
pid = os.fork()
if pid == 0:
    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)
info['unshare user namespace'] = os.waitpid(pid, 0)[1] == 0
print(json.dumps({'attempts': out, 'info': info}))
`
	res, er := s.run(t, code, nil)
	var out struct {
		Attempts map[string]string
		Info     map[string]any
	}
	lastJSON(t, res, er, &out)
	for name, v := range out.Attempts {
		if !strings.HasPrefix(v, "denied") {
			t.Errorf("%s: succeeded (%s)", name, v)
		}
	}
	if out.Info["no_new_privs"] != true && out.Info["usr_nosuid"] != true {
		t.Errorf("setuid binaries can elevate: no_new_privs is off and /usr/bin is not nosuid")
	}
	if now, _ := os.Hostname(); now != hostname {
		t.Errorf("the host's name changed from %q to %q", hostname, now)
	}
	t.Logf("info: %v", out.Info)
}

// /dev holds no disks and no kernel memory.
func caseDevices(t *testing.T, tg *secTarget, s *secSession) {
	code := `import json, os, stat
block, risky = [], []
for root, dirs, files in os.walk('/dev'):
    for n in dirs + files:
        p = os.path.join(root, n)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        if stat.S_ISBLK(st.st_mode):
            block.append(p)
        if n in ('mem', 'kmem', 'port', 'kmsg', 'fuse', 'mapper', 'disk') or n.startswith(('sd', 'vd', 'xvd', 'nvme', 'loop', 'dm-', 'hd')):
            risky.append(p)
print(json.dumps({'block': block, 'risky': risky, 'dev': sorted(os.listdir('/dev'))}))
`
	res, er := s.run(t, code, nil)
	var out struct {
		Block, Risky, Dev []string
	}
	lastJSON(t, res, er, &out)
	if len(out.Block) > 0 || len(out.Risky) > 0 {
		t.Errorf("the job's /dev has block devices %v and kernel or disk nodes %v (all: %v)", out.Block, out.Risky, out.Dev)
	}
}

// A job cannot leave its cgroup nor raise its cgroup's limits.
func caseCgroupEscape(t *testing.T, tg *secTarget, s *secSession) {
	s.confined(t, "cgroup writes")
	code := `import glob, json, os
pid = str(os.getpid())
out = {}
def attempt(name, path, value):
    try:
        with open(path, 'w') as f:
            f.write(value)
        out[name + ' ' + path] = 'WROTE'
    except Exception as e:
        out[name + ' ' + path] = 'denied: ' + str(e)
for p in glob.glob('/sys/fs/cgroup/cgroup.procs') + glob.glob('/sys/fs/cgroup/*/cgroup.procs') + glob.glob('/sys/fs/cgroup/*/tasks'):
    attempt('move to a root cgroup', p, pid)
mine = []
for line in open('/proc/self/cgroup'):
    _, ctrls, path = line.rstrip('\n').split(':', 2)
    for c in (ctrls.split(',') if ctrls else ['unified']):
        if c.startswith('name='):
            c = c[5:]
        d = '/sys/fs/cgroup/' + c + path
        if not os.path.isdir(d):
            d = '/sys/fs/cgroup' + path
        mine.append(d)
for d in mine + glob.glob('/sys/fs/cgroup/*/codexec*') + glob.glob('/sys/fs/cgroup/*/*/codexec*'):
    if not os.path.isdir(d):
        continue
    for knob in ('memory.limit_in_bytes', 'memory.memsw.limit_in_bytes', 'memory.max', 'pids.max', 'cpu.cfs_quota_us', 'cpu.max'):
        k = os.path.join(d, knob)
        if os.path.exists(k):
            try:
                cur = open(k).read().strip()
            except Exception:
                cur = 'max'
            attempt('rewrite a limit', k, cur)
    attempt('move to the parent', os.path.join(os.path.dirname(d.rstrip('/')), 'cgroup.procs'), pid)
    try:
        os.mkdir(os.path.join(d, 'escape'))
        os.rmdir(os.path.join(d, 'escape'))
        out['mkdir ' + d] = 'CREATED'
    except Exception as e:
        out['mkdir ' + d] = 'denied: ' + str(e)
print(json.dumps({'cgroup': open('/proc/self/cgroup').read(), 'attempts': out}))
`
	res, er := s.run(t, code, nil)
	var out struct {
		Cgroup   string
		Attempts map[string]string
	}
	lastJSON(t, res, er, &out)
	for name, v := range out.Attempts {
		if !strings.HasPrefix(v, "denied") {
			t.Errorf("%s: %s", name, v)
		}
	}
	t.Logf("/proc/self/cgroup:\n%s%d attempts", out.Cgroup, len(out.Attempts))
}

// A job that signals its parent, pid 1, the worker and its zygote by their
// host pids, every process it can see, its parent's process group, and -1:
// the worker lives, the zygote is the same process, the next job runs.
func caseSignals(t *testing.T, tg *secTarget, s *secSession) {
	s.confined(t, "kill(-1) and signals to every visible process")
	s.mustSucceed(t, "print('warm')")
	worker := tg.workerPIDs()[0]
	var zygs []*hostProc
	if tg.zygote {
		zygs = zygotes(worker)
		if len(zygs) == 0 {
			var b strings.Builder
			for _, p := range descendants(scanProcs(), worker) {
				fmt.Fprintf(&b, "  %s\n", p)
			}
			t.Errorf("no zygote (a process whose command line holds codexec-zygote) under the worker %d; its processes:\n%s", worker, b.String())
		}
	}
	zpids := []int{}
	for _, z := range zygs {
		zpids = append(zpids, z.pid)
	}
	attacks := []struct{ name, code string }{
		{"targets by pid", fmt.Sprintf(`import json, os, signal
WORKER, ZYGOTES = %d, %s
out = {}
def k(name, pid, sig):
    if pid == os.getpid() or pid <= 0:
        return
    try:
        os.kill(pid, sig)
        out[name + ' ' + sig.name] = 'SENT'
    except Exception as e:
        out[name + ' ' + sig.name] = type(e).__name__
for sig in (signal.SIGSTOP, signal.SIGKILL):
    k('parent', os.getppid(), sig)
    k('pid 1', 1, sig)
    k('worker', WORKER, sig)
    for z in ZYGOTES:
        k('zygote', z, sig)
print(json.dumps(out))
`, worker, mustJSON(zpids))},
		{"every visible pid", `import os, signal
sent = []
for p in os.listdir('/proc'):
    if p.isdigit() and int(p) != os.getpid():
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(int(p), sig)
                sent.append(p + ' ' + sig.name)
            except Exception:
                pass
print('sent', sent)
`},
		// SIGKILL only: a SIGSTOP to a group that holds the job would
		// only stop the job itself until its timeout.
		{"parent's process group", `import os, signal
try:
    os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
    print('sent SIGKILL to the parent group', flush=True)
except Exception as e:
    print('SIGKILL to the parent group:', e, flush=True)
`},
		{"kill -1", "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('survived kill(-1)')\n"},
		{"own process group", "import os, signal\nos.killpg(0, signal.SIGKILL)\n"},
	}
	for _, a := range attacks {
		res, er := s.run(t, a.code, &jobOpts{timeout: 30})
		t.Logf("%s: status %q exit %d signal %q: %s %s", a.name, er.Status, er.ExitCode, er.Signal, clip(strings.TrimSpace(er.Stdout), 600), clip(strings.TrimSpace(er.Stderr), 300))
		// The worker's and the zygote's host pids must name nothing the
		// job may signal (its parent and pid 1 may be helpers of its own).
		var out map[string]string
		if err := json.Unmarshal([]byte(strings.TrimSpace(er.Stdout)), &out); err == nil {
			for k, v := range out {
				if v == "SENT" && (strings.HasPrefix(k, "worker") || strings.HasPrefix(k, "zygote")) {
					t.Errorf("%s: the job signalled the %s", a.name, k)
				}
			}
		} else if a.name == "targets by pid" && er.Signal == "" {
			t.Errorf("%s: the attack did not run to its report:\n%s", a.name, dump(res, er))
		}
		if ok, why := alive(worker); !ok {
			t.Fatalf("after %q the worker %d is %s:\n%s", a.name, worker, why, dump(res, er))
		}
		for _, z := range zygs {
			now := readProc(z.pid)
			if now == nil || now.start != z.start || now.cmdline != z.cmdline {
				t.Errorf("after %q the zygote %d is gone or replaced (was %s, now %v)", a.name, z.pid, z, now)
			} else if ok, why := alive(z.pid); !ok {
				t.Errorf("after %q the zygote %d is %s", a.name, z.pid, why)
			}
		}
		if res, er := s.run(t, "print(1)", &jobOpts{timeout: 30}); res.IsError || er.Stdout != "1\n" {
			t.Fatalf("after %q the next job fails:\n%s", a.name, dump(res, er))
		}
	}
	// The same zygote still serves the session.
	if tg.zygote && len(zygs) > 0 {
		now := zygotes(worker)
		for _, z := range zygs {
			if !slices.ContainsFunc(now, func(p *hostProc) bool { return p.pid == z.pid && p.start == z.start }) {
				t.Errorf("zygote %d was replaced; now %v", z.pid, now)
			}
		}
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// A package's build runs its author's code: an install job builds an
// sdist whose in-tree build backend is hostile. Install jobs get the
// package index (network), and "still write only into the environment
// being built": the build must not write the host, read the host's
// secrets, see the worker's environment or command line, reach the
// worker's loopback services, read another session's files, or leave a
// process behind.
func TestSecurityDevHostileBuild(t *testing.T) {
	requireSandbox(t)
	t.Parallel()
	wh := t.TempDir()
	marker := "codexec-sec-build-" + randHex(t, 6)
	victim, victimDir := readableVictim(t)
	venv := venvFor(t)
	site, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))

	e2eWheel(t, wh, "gamma", "1.0", "gamma")
	e2eWheel(t, wh, "beta", "1.0", "beta")
	tg := startSecDev(t, "zygote", "--no-index", "--find-links", wh, "--managers", "uv,venv")
	owner := tg.newSession(t)
	// Another session's environment, built before the hostile one: its
	// files come from the installers' shared cache.
	if res, er := envCall(t, owner.c, "install_dependencies", map[string]any{"packages": []any{"gamma"}}); res.IsError {
		t.Fatalf("install gamma: %s %s", er.Message, er.Output)
	}
	gammaCheck := "import gamma\nprint(gamma.VALUE, getattr(gamma, 'PWNED', 'clean'))"
	if _, er := owner.run(t, gammaCheck, nil); er.Stdout != "gamma 1.0 clean\n" {
		t.Fatalf("gamma before the hostile build: %+v", er)
	}
	secret := "SECRET-CONTENT-" + randHex(t, 12)
	if res, er := owner.run(t, fmt.Sprintf("open('build-secret.txt', 'w').write(%s)", pyStr(secret)), nil); res.IsError {
		t.Fatalf("write the secret:\n%s", dump(res, er))
	}

	probe := "codexec-build-probe-" + randHex(t, 6)
	writes := []string{victim, filepath.Join(tg.dataDirs[0], probe), filepath.Join(filepath.Dir(tg.dataDirs[0]), probe),
		"/usr/local/bin/" + probe, "/etc/" + probe, "/root/" + probe, "/var/tmp/" + probe}
	for _, d := range site {
		writes = append(writes, filepath.Join(d, probe+".pth"))
	}
	t.Cleanup(func() {
		for _, p := range writes[1:] {
			os.Remove(p)
		}
	})
	before := snap(victim, victimDir, venv)
	for _, d := range site {
		before[d] = factsOf(d)
	}
	cfg, _ := json.Marshal(map[string]any{
		"write": writes, "ports": tg.ports, "marker": marker,
		"walk": append(tg.dataDirs, "/tmp", "/var/tmp", "/root", "/home"),
	})
	writeHostileSdist(t, wh, string(cfg))

	s := tg.newSession(t)
	res, er := envCall(t, s.c, "install_dependencies", map[string]any{"packages": []any{"evilpkg"}})
	t.Logf("install: isError=%v status %q: %s", res.IsError, er.Status, clip(er.Message+"\n"+er.Output, 2000))
	// Whatever the install did, its build is over: nothing of it runs on.
	s.assertNoLeftovers(t, marker, false)
	before.assertUnchanged(t, "after a hostile package build")
	for _, p := range writes[1:] {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("the package build created %s on the host", p)
		}
	}
	// The shared cache is no way into other sessions' environments: the
	// one built before, and one built after from the same cache.
	if _, er := owner.run(t, gammaCheck, nil); er.Stdout != "gamma 1.0 clean\n" {
		t.Errorf("another session's environment after the hostile build:\n%s", dump(nil, er))
	}
	later := tg.newSession(t)
	// A new environment (gamma and beta: a spec not built yet), which
	// takes gamma from the cache.
	if res, er := envCall(t, later.c, "install_dependencies", map[string]any{"packages": []any{"gamma", "beta"}}); res.IsError {
		t.Errorf("install gamma after the hostile build: %s %s", er.Message, er.Output)
	} else if _, er := later.run(t, gammaCheck, nil); er.Stdout != "gamma 1.0 clean\n" {
		t.Errorf("an environment built after the hostile build:\n%s", dump(nil, er))
	}
	if res.IsError {
		t.Logf("the build failed, so its report cannot be read: only the host was checked")
		return
	}
	jres, jer := s.run(t, "import evilpkg\nprint(evilpkg.REPORT)", nil)
	if jres.IsError {
		t.Fatalf("import the built package:\n%s", dump(jres, jer))
	}
	all := everything(jres, jer)
	for _, c := range tg.canaries {
		if strings.Contains(all, c) {
			t.Errorf("the build saw the worker's %q", c)
		}
	}
	if strings.Contains(all, secret) {
		t.Errorf("the build read another session's file")
	}
	for _, l := range readShadowLines() {
		if strings.Contains(all, l) {
			t.Errorf("the build read the host's /etc/shadow")
			break
		}
	}
	var rep struct {
		UID      int               `json:"uid"`
		Hits     [][]string        `json:"hits"`
		Writes   map[string]string `json:"writes"`
		Connect  map[string]string `json:"connect"`
		Found    [][]string        `json:"found"`
		Poisoned []string          `json:"poisoned"`
		PIDs     int               `json:"pids"`
		EnvKeys  []string          `json:"env_keys"`
		Error    string            `json:"error"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(jer.Stdout)), &rep); err != nil {
		t.Fatalf("the build's report: %v\n%s", err, dump(jres, jer))
	}
	if rep.Error != "" {
		t.Errorf("the hostile build failed: %s", rep.Error)
	}
	if len(rep.Hits) > 0 {
		t.Errorf("the build found the worker's settings: %v", rep.Hits)
	}
	// (Writes inside the sandbox may land in a private file system; what
	// counts is the host, checked above.)
	t.Logf("the build's writes: %v; poisoned: %v", rep.Writes, rep.Poisoned)
	for name, v := range rep.Connect {
		if strings.HasPrefix(v, "CONNECTED") {
			t.Errorf("the build reached the worker's %s on the loopback", name)
		}
	}
	if len(rep.Found) > 0 {
		t.Logf("files the build could read that hold a SECRET-CONTENT- token (the secret itself is checked above): %v", rep.Found)
	}
	t.Logf("the build ran as uid %d, saw %d pids, environment %v", rep.UID, rep.PIDs, rep.EnvKeys)
}

// hostileBackend is the in-tree PEP 517 backend of evilpkg: building the
// wheel first probes what it can reach (configured by hostile.json) and
// puts the findings in the package, as REPORT.
const hostileBackend = `import glob, json, os, socket, subprocess, sys, zipfile, hashlib, base64
CFG = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'hostile.json')))

def _probe():
    r = {'uid': os.getuid(), 'euid': os.geteuid(), 'cwd': os.getcwd(), 'env_keys': sorted(os.environ)}
    hits = []
    keys = [b'canary', b'nats://', b'redis://', b'aws_secret']
    for p in glob.glob('/proc/[0-9]*/environ') + glob.glob('/proc/[0-9]*/cmdline'):
        try:
            data = open(p, 'rb').read()
        except Exception:
            continue
        for item in data.split(b'\0'):
            if any(k in item.lower() for k in keys):
                hits.append([p, item[:200].decode('latin1')])
    for k, v in os.environ.items():
        if any(x in (k + '=' + v).lower().encode() for x in keys):
            hits.append(['environ', k + '=' + v])
    r['hits'] = hits
    r['pids'] = len(glob.glob('/proc/[0-9]*'))
    try:
        r['shadow'] = open('/etc/shadow').read()
    except Exception as e:
        r['shadow'] = 'error: ' + str(e)
    w = {}
    for p in CFG['write']:
        try:
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.write(fd, b'\n')
            os.close(fd)
            w[p] = 'WROTE'
        except Exception as e:
            w[p] = 'denied: ' + str(e)
    r['writes'] = w
    c = {}
    for name, port in CFG['ports'].items():
        try:
            s = socket.create_connection(('127.0.0.1', port), timeout=3)
            c[name] = 'CONNECTED'
            s.close()
        except Exception as e:
            c[name] = 'error: ' + str(e)
    r['connect'] = c
    tok = ''.join(['SEC', 'RET-CON', 'TENT-']).encode()
    found, n = [], 0
    for root in CFG['walk']:
        for dp, dn, fn in os.walk(root):
            for f in fn:
                n += 1
                if n > 50000:
                    break
                p = os.path.join(dp, f)
                try:
                    with open(p, 'rb') as fh:
                        data = fh.read(1 << 20)
                except Exception:
                    continue
                i = data.find(tok)
                if i >= 0:
                    found.append([p, data[i:i + 48].decode('latin1')])
    r['found'] = found
    # Poison the installers' shared cache: every copy of gamma it holds.
    poisoned = []
    for root in [os.environ.get('UV_CACHE_DIR', ''), os.environ.get('PIP_CACHE_DIR', '')] + CFG['walk']:
        if not root:
            continue
        for dp, dn, fn in os.walk(root):
            for f in fn:
                p = os.path.join(dp, f)
                if p.endswith(os.path.join('gamma', '__init__.py')) and 'evilpkg' not in p:
                    try:
                        with open(p, 'a') as fh:
                            fh.write('\nPWNED = "poisoned by another session"\n')
                        poisoned.append(p)
                    except Exception:
                        pass
    r['poisoned'] = poisoned
    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(1000)', CFG['marker']], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r

def get_requires_for_build_wheel(config_settings=None):
    return []

def get_requires_for_build_sdist(config_settings=None):
    return []

def build_sdist(sdist_directory, config_settings=None):
    raise NotImplementedError

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    try:
        rep = _probe()
    except Exception as e:
        rep = {'error': repr(e)}
    info = 'evilpkg-1.0.dist-info'
    files = [('evilpkg/__init__.py', 'REPORT = %r\n' % json.dumps(rep)),
             (info + '/METADATA', 'Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n'),
             (info + '/WHEEL', 'Wheel-Version: 1.0\nGenerator: codexec-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n'),
             (info + '/top_level.txt', 'evilpkg\n')]
    record = ''
    for name, body in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(body.encode()).digest()).rstrip(b'=').decode()
        record += '%s,sha256=%s,%d\n' % (name, digest, len(body.encode()))
    record += info + '/RECORD,,\n'
    files.append((info + '/RECORD', record))
    name = 'evilpkg-1.0-py3-none-any.whl'
    with zipfile.ZipFile(os.path.join(wheel_directory, name), 'w') as z:
        for n, body in files:
            z.writestr(n, body)
    return name
`

// writeHostileSdist writes evilpkg-1.0.tar.gz into dir.
func writeHostileSdist(t *testing.T, dir, cfg string) {
	t.Helper()
	files := [][2]string{
		{"PKG-INFO", "Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n"},
		{"pyproject.toml", "[build-system]\nrequires = []\nbuild-backend = \"backend\"\nbackend-path = [\".\"]\n\n[project]\nname = \"evilpkg\"\nversion = \"1.0\"\n"},
		{"backend.py", hostileBackend},
		{"hostile.json", cfg},
	}
	f, err := os.Create(filepath.Join(dir, "evilpkg-1.0.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for _, file := range files {
		hdr := &tar.Header{Name: "evilpkg-1.0/" + file[0], Mode: 0o644, Size: int64(len(file[1])), ModTime: time.Now(), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(file[1])); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, gz, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// A job hands 700 MiB of a memfd it filled to another job of its session
// over a Unix socket in their working directory, and ends. The kernel
// keeps charging the pages to the first job's cgroup: once that cgroup
// went back to the worker's pool, b's next job, given it, was killed at
// its 1 GiB limit after allocating 400 MiB, while a held the memory under
// no limit of its own. Now the holder, a process of a's uid, is killed,
// and b's job runs.
func caseMemoryHeldPastItsJob(t *testing.T, tg *secTarget, b *secSession) {
	if tg.zygote {
		waitForZygote(t, tg.logs)
	}
	a := tg.newSession(t)
	name := randHex(t, 6)
	hold := fmt.Sprintf(`import array, os, socket, time
NAME = %s
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind('hold-' + NAME + '.sock')
s.listen(1)
open('ready-' + NAME, 'w').close()
c, _ = s.accept()
fds = []
_, anc, _, _ = c.recvmsg(8, socket.CMSG_SPACE(4))
for _, _, data in anc:
    a = array.array('i'); a.frombytes(data); fds += list(a)
print('holding', fds, flush=True)
deadline = time.time() + 60
while time.time() < deadline and not os.path.exists('done-' + NAME):
    time.sleep(0.05)
print('held to the end', flush=True)
`, pyStr(name))
	held := make(chan secResult, 1)
	go func() {
		args := map[string]any{"code": hold, "timeout_seconds": 90}
		res, err := a.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "execute_code", Arguments: args}})
		var er secResult
		if err == nil && res.StructuredContent != nil {
			raw, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(raw, &er)
		} else if err != nil {
			er.Message = "call failed: " + err.Error()
		}
		held <- er
	}()
	defer a.run(t, fmt.Sprintf("open('done-' + %s, 'w').close()", pyStr(name)), nil)
	_, er := a.run(t, fmt.Sprintf(`import array, os, socket, time
NAME = %s
deadline = time.time() + 60
while not os.path.exists('ready-' + NAME) and time.time() < deadline:
    time.sleep(0.05)
fd = os.memfd_create('held')
b = b'x' * (1 << 20)
for _ in range(700):
    os.write(fd, b)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect('hold-' + NAME + '.sock')
c.sendmsg([b'x'], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array('i', [fd]))])
print('handed over')
`, pyStr(name)), &jobOpts{timeout: 90})
	if er.Status != "ok" || !strings.Contains(er.Stdout, "handed over") {
		t.Fatalf("a's filling job: %s %q %q", er.Status, er.Message, er.Stdout+er.Stderr)
	}
	select {
	case h := <-held:
		if strings.Contains(h.Stdout, "held to the end") || h.Status == "ok" {
			t.Errorf("a's holding job was not stopped: %s %q %q", h.Status, h.Message, h.Stdout)
		}
		t.Logf("a's holding job: %s, %s", h.Status, h.Message)
	case <-time.After(15 * time.Second):
		t.Errorf("a's holding job still holds the memory of a job that ended 15 s ago")
	}
	_, ber := b.run(t, "x = bytearray(400 << 20)\nprint('allocated')", nil)
	if ber.Status != "ok" || !strings.Contains(ber.Stdout, "allocated") {
		t.Errorf("b's job of 400 MiB under a 1 GiB limit: %s (limit %q) %q", ber.Status, ber.Limit, ber.Message)
	}

	// What the kernel frees by itself after the job is not held: System V
	// shared memory left in a job's IPC namespace goes in a kernel worker
	// once its last process has, and was still charged when the group was
	// found empty. b's other job, running meanwhile, must not be killed.
	other := make(chan secResult, 1)
	go func() {
		args := map[string]any{"code": "import time\ntime.sleep(6)\nprint('survived')", "timeout_seconds": 60}
		res, err := b.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "execute_code", Arguments: args}})
		var er secResult
		if err == nil && res.StructuredContent != nil {
			raw, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(raw, &er)
		} else if err != nil {
			er.Message = "call failed: " + err.Error()
		}
		other <- er
	}()
	for range 3 {
		_, ser := b.run(t, `import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
for _ in range(3):
    addr = libc.shmat(libc.shmget(0, 100 << 20, 0o1000 | 0o600), None, 0)
    ctypes.memset(addr, 1, 100 << 20)
print('left')
`, nil)
		if ser.Status != "ok" {
			t.Errorf("b's job leaving 300 MiB of System V shared memory: %s %q", ser.Status, ser.Message)
		}
	}
	if o := <-other; o.Status != "ok" || !strings.Contains(o.Stdout, "survived") {
		t.Errorf("b's other job, while b's jobs left System V shared memory: %s %q", o.Status, o.Message)
	}
}
