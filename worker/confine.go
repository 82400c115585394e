package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/diskfs"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
	"github.com/codexec/codexec/worker/seccomp"
)

// setupSandbox decides how this worker confines jobs (Config.Sandbox): it
// probes the sandbox launcher (Config.SandboxLauncher), and finds the cgroups that give memory and process
// limits their reach. It fails closed: unless the operator asked for
// --sandbox off, a machine without a working sandbox gets no worker (auto
// and require alike), since jobs run unconfined would run as the worker's
// user, root on most servers, and read what it can. With off, jobs run as
// the worker's user, and the worker says so.
func (w *Worker) setupSandbox(ctx context.Context) error {
	if name := strings.ToLower(w.cfg.Sandbox); name != SandboxOff {
		box, err := w.probeSandbox(ctx)
		if err != nil {
			return fmt.Errorf("worker: no working sandbox, and without one no job runs (--sandbox %s, --sandbox-launcher %s): %w. "+
				"%s"+
				"Namespaces must be allowed (a container needs them allowed: docker run --privileged, or a seccomp profile that permits unshare), "+
				"or pass --sandbox off to run jobs unconfined, as this worker's own user", name, w.cfg.SandboxLauncher, err, launcherAdvice(w.cfg.SandboxLauncher))
		}
		w.box = box
	} else {
		w.log.Warn("sandbox off: jobs run unconfined, as the worker's own user, and see what it sees")
	}
	if w.box != nil && w.box.Rootless() {
		w.log.Warn("sandbox without root: every job runs as the worker's own uid (in namespaces of its own); run the worker as root to give each session a uid of its own")
	}
	if w.box != nil && !w.box.Rootless() {
		w.uids = sandbox.NewUIDs(w.cfg.UIDDir)
	}
	if w.box != nil {
		for _, dir := range []string{w.sessionsRoot(), w.cfg.ScriptsDir} {
			// Jobs (other uids) may pass through to their own directory but
			// not list the others.
			if err := os.Chmod(dir, 0o711); err != nil {
				return fmt.Errorf("worker: %w", err)
			}
		}
	}
	// The worker's id plus its pid: unique among the live workers of the
	// host even when two share an id by mistake.
	if name := cgroupName(fmt.Sprintf("%s.%d", w.cfg.ID, os.Getpid())); w.box != nil && name != "" {
		cg, err := cgroup.Detect(name)
		if err != nil {
			w.log.Warn("no cgroups: memory and process limits fall back to rlimits (per process)", "reason", err)
		} else {
			w.cgroups = cg
			w.cgroupPool = &cgroupPool{m: cg, max: 2 * w.cfg.Concurrency, keepLimits: !w.box.Rootless(),
				tcpBytes: tcpShare(w.cfg.Concurrency + w.cfg.MaxContexts)}
			if !w.box.Rootless() && os.Geteuid() == 0 {
				// Each session has a uid of its own: what runs as it is its.
				w.cgroupPool.killUID = killUID
			}
		}
	}
	if w.box != nil {
		mounts := []sandbox.Mount{{Path: w.sessionsRoot(), Write: true}, {Path: w.cfg.ScriptsDir}}
		if w.cgroups != nil {
			for _, d := range w.cgroups.Dirs() {
				mounts = append(mounts, sandbox.Mount{Path: d, Write: true})
			}
		}
		// The jobs' system-call filter: installed by each job's process
		// (zygote.py), not by bubblewrap, whose --seccomp would filter
		// the zygote that still makes each job's namespaces and mounts.
		filter, err := seccomp.Program(w.cfg.SeccompAllow)
		if err != nil {
			w.log.Warn("no system-call filter for jobs on this machine; the rest of the sandbox holds", "reason", err)
		}
		w.sandboxCfg = &runner.SandboxConfig{
			Box: w.box, Mounts: mounts, Hidden: []string{w.sessionsRoot(), w.cfg.ScriptsDir}, Seccomp: filter,
			HostCgroupNS: w.cgroups != nil && w.cgroups.Version() == 2,
		}
		w.log.Info("sandbox ready", "launcher", w.box.Version(), "network", w.box.Network(), "cgroups", w.cgroups != nil,
			"seccomp", filter != nil, "seccomp_allow", w.cfg.SeccompAllow)
	}
	return nil
}

func (w *Worker) probeSandbox(ctx context.Context) (*sandbox.Sandbox, error) {
	return sandbox.Probe(ctx, sandbox.Config{
		Launcher: w.cfg.SandboxLauncher, Bwrap: w.cfg.Bwrap,
		Network:  strings.ToLower(w.cfg.JobNetwork) == NetworkAllow,
		ReadOnly: w.cfg.SandboxReadOnly, Devices: w.cfg.SandboxDevices,
	})
}

// launcherAdvice is what the error of a worker without a sandbox
// suggests for the launcher it tried.
func launcherAdvice(launcher string) string {
	if launcher == sandbox.LauncherBwrap {
		return "Install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or use the built-in launcher (--sandbox-launcher builtin). "
	}
	return "The built-in launcher needs Linux with user, PID, mount and network namespaces; bubblewrap is the other choice (--sandbox-launcher bwrap). "
}

// cgroupName is the worker's id as a cgroup name, "" if it cannot be one.
func cgroupName(id string) string {
	if len(id) == 0 || len(id) > 64 {
		return ""
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return ""
		}
	}
	return id
}

// sessionDirs makes the session's working directory and scripts directory.
// In a sandbox both belong to the session's uid, which it returns: the
// working directory read-write for it alone (0700), the scripts directory
// readable (0500; the job sees it read-only, the worker writes it as root).
// With session file systems the working directory is the Work directory of
// the session's own, mounted here if it was not (disk, which the caller
// releases); disk is nil for a session whose directory is measured. The
// caller ends its use with releaseSession: until then, a collection of the
// workspace leaves its directories here alone (collect.go).
func (w *Worker) sessionDirs(ctx context.Context, scope string) (cwd, scripts string, uid int, disk *sessionDisk, err error) {
	w.useScope(scope)
	cwd = filepath.Join(w.sessionsRoot(), scope)
	if w.sessionFS != nil {
		if disk, err = w.sessionFS.acquire(ctx, scope); err != nil {
			w.endScope(scope)
			return "", "", 0, nil, fmt.Errorf("session file system: %w", err)
		}
		if disk != nil {
			// As the sandbox names the sessions root (diskfs resolves links).
			cwd = filepath.Join(cwd, diskfs.Work)
		}
	}
	cwd, scripts, uid, err = w.sessionDirsAt(cwd, scope)
	if err != nil {
		w.releaseSession(scope, disk)
		return "", "", 0, nil, err
	}
	return cwd, scripts, uid, disk, nil
}

// sessionDirsAt makes and owns the working directory cwd and the
// session's scripts directory (see sessionDirs).
func (w *Worker) sessionDirsAt(cwd, scope string) (_, scripts string, uid int, err error) {
	scripts = filepath.Join(w.cfg.ScriptsDir, scope)
	if w.box == nil || w.box.Rootless() {
		for _, dir := range []string{cwd, scripts} {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return "", "", 0, err
			}
		}
		return cwd, scripts, os.Getuid(), nil
	}
	if uid, err = w.uids.Dir(cwd, 0o700); err != nil {
		return "", "", 0, err
	}
	if err := os.Mkdir(scripts, 0o500); err != nil && !errors.Is(err, os.ErrExist) {
		return "", "", 0, err
	}
	if err := sandbox.Own(scripts, uid, 0o500); err != nil {
		return "", "", 0, err
	}
	return cwd, scripts, uid, nil
}

// jobLimits is what confines one execution job besides the sandbox: its
// cgroup, if the worker has cgroups, and the disk watch.
type jobLimits struct {
	set   limits.Set
	pool  *cgroupPool
	group *cgroup.Group
	base  cgroup.Usage // the group's counters when the job started
	after func()       // called once the group is empty (a GPU lease's release)
	uid   int          // the session's own uid (0 where sessions share one)
}

// cgroupLimits are the limits of set that a job's cgroup enforces.
func cgroupLimits(set limits.Set) cgroup.Limits {
	return cgroup.Limits{MemoryBytes: set.Memory, Pids: set.Procs}
}

// setIdle gives the job's cgroup the least CPU weight, or its weight back
// (cgroup.Group.SetIdle); a failure costs only fairness, and is logged.
func (jl *jobLimits) setIdle(idle bool, log interface{ Warn(string, ...any) }) {
	if jl.group == nil {
		return
	}
	if err := jl.group.SetIdle(idle); err != nil {
		log.Warn("set the cgroup's CPU weight", "idle", idle, "err", err)
	}
}

// usage is what the kernel counted for this job in its cgroup.
func (jl *jobLimits) usage() cgroup.Usage {
	if jl.group == nil {
		return cgroup.Usage{}
	}
	return jl.group.Usage().Sub(jl.base)
}

// cgroupPool keeps the job cgroups of a worker for reuse: creating and
// removing a group (a v1 memory group above all) costs about as much CPU as
// a small job. A group goes back to the pool only once it is empty, and
// gets the next job's limits before that job joins it.
type cgroupPool struct {
	m    *cgroup.Manager
	max  int
	mu   sync.Mutex
	free []freeGroup
	made int
	// keepLimits lets a group keep the limits its last job had when the
	// next job has the same, rather than write them again: only root can
	// change them (the worker runs as root, its jobs as other uids), so
	// they are what was written. A rootless worker's jobs run as its own
	// uid, the owner of its groups' files: it writes them for every job.
	keepLimits bool
	// tcpBytes is the most TCP buffer memory one group may hold
	// (cgroup.Limits.TCPBytes, v1), its job's memory limit where lower;
	// 0 for none.
	tcpBytes int64
	// killUID kills every process of a session's uid (killUID), to end what
	// holds memory a job of the session left charged to its group; nil
	// where sessions share a uid.
	killUID func(uid int) int
}

// freeGroup is an empty group of the pool, with its counters as they were
// once it was emptied: nothing runs in it until its next job, so they are
// that job's base, read off the job's path (the release after a job runs
// beside its result's way back). Only a job process that joins its group
// after its run returned (a start cut short) could move them meanwhile;
// get kills it and reads them again when it finds one.
type freeGroup struct {
	g      *cgroup.Group
	base   cgroup.Usage
	limits cgroup.Limits // written for its last job
}

// get returns a group with limits l for a job, and its counters now (the
// base its job's usage is counted from).
func (p *cgroupPool) get(l cgroup.Limits) (*cgroup.Group, cgroup.Usage, error) {
	l = p.withTCP(l)
	p.mu.Lock()
	var f freeGroup
	if n := len(p.free); n > 0 {
		f, p.free = p.free[n-1], p.free[:n-1]
	}
	p.made++
	name := fmt.Sprintf("job-%d", p.made)
	p.mu.Unlock()
	if f.g != nil {
		var found bool
		var err error
		if p.keepLimits && f.limits == l {
			found, err = f.g.KillFound()
		} else {
			found, err = f.g.Reset(l)
		}
		if err == nil {
			if found {
				// Something joined it after it was emptied (and is killed
				// now): its counters may have moved.
				f.base = f.g.Usage()
			}
			return f.g, f.base, nil
		}
		_ = f.g.Remove()
	}
	g, err := p.m.New(name, l)
	if err != nil {
		return nil, cgroup.Usage{}, err
	}
	return g, g.Usage(), nil
}

// heldMax is the most memory an emptied group may still be charged for,
// beyond what reclaim gives back (cgroup.Group.Held), and go back to the
// pool: a job's memory dies with its processes, its /tmp and /dev/shm with
// its namespaces, before its group is empty.
const heldMax = 1 << 20

// heldSettle bounds how long putJob waits for memory still charged to an
// emptied group to go by itself: the kernel frees a job's IPC namespace,
// and the System V shared memory a job left in it, in a worker thread
// after its last process has gone (300 MiB of it was still charged when
// the group was found empty).
const heldSettle = 5 * time.Second

// settleHeld returns g's held memory (cgroup.Group.Held) once it is at
// most heldMax, or what it still is after heldSettle. Off the job's path.
func settleHeld(g *cgroup.Group) int64 { return settleBelow(g.Held) }

// settleBelow reads n until it is at most heldMax, for heldSettle at most,
// and returns the last reading.
func settleBelow(n func() int64) int64 {
	v := n()
	for deadline := time.Now().Add(heldSettle); v > heldMax && time.Now().Before(deadline); v = n() {
		time.Sleep(20 * time.Millisecond)
	}
	return v
}

// settleKernel returns the kernel memory g is still charged for
// (cgroup.Group.Kernel) once reclaim has taken back what it could: at most
// heldMax, or what it still is after heldSettle. A job's own kernel memory
// (its page tables, its namespaces, the inodes of its /tmp) goes with its
// processes and namespaces, and the caches it left (dentries and inodes of
// the files it touched) to reclaim, which runs only when they are more
// than heldMax. What stays is held from outside: until 2026-12-05 a job
// that made 200,000 empty files in its /tmp and passed a descriptor of it
// to its session's context left 183 MiB of inodes charged to its group, no
// page of anonymous or shared memory among them, and the next job of
// another session, given the group at 256 MiB, was killed at its limit
// after allocating less than 200 MiB. Off the job's path.
func settleKernel(g *cgroup.Group) int64 {
	k := g.Kernel()
	if k <= heldMax {
		return k
	}
	_ = g.Reclaim()
	if k = settleBelow(g.Kernel); k <= heldMax {
		return k
	}
	// What the namespaces' teardown freed meanwhile may have left caches
	// that only a reclaim takes.
	_ = g.Reclaim()
	return g.Kernel()
}

// heldError says that a group was removed rather than reused because memory
// its job made is still charged to it.
type heldError struct {
	held   int64
	uid    int // the session's uid, 0 if none of its own
	killed int // processes of uid killed to free it
}

func (e *heldError) Error() string {
	if e.uid > 0 {
		return fmt.Sprintf("%d bytes of its job's memory still charged to it; %d processes of the session's uid %d killed", e.held, e.killed, e.uid)
	}
	return fmt.Sprintf("%d bytes of its job's memory still charged to it", e.held)
}

// withTCP is l with the pool's limit of TCP buffers, or l's memory limit
// where that is lower.
func (p *cgroupPool) withTCP(l cgroup.Limits) cgroup.Limits {
	l.TCPBytes = p.tcpBytes
	if p.tcpBytes > 0 && l.MemoryBytes > 0 && l.MemoryBytes < p.tcpBytes {
		l.TCPBytes = l.MemoryBytes
	}
	return l
}

// tcpShare is the TCP buffer memory one of n groups may hold: a share of
// the host's tcp_mem pressure threshold (its first figure, in pages), so
// that n jobs and contexts together never bring every TCP socket of the
// host, the worker's own connections included, under memory pressure or
// past its hard limit, where their sends fail. At least 4 MiB; 0 (no
// limit) where the threshold cannot be read.
func tcpShare(n int) int64 {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	pages, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || pages <= 0 {
		return 0
	}
	return max(pages*int64(os.Getpagesize())/int64(max(n, 1)), 4<<20)
}

// put takes g back after its job, killing what is left in it; a group that
// cannot be emptied, one still charged for memory its job made (heldMax),
// or one too many, is removed.
func (p *cgroupPool) put(g *cgroup.Group, l cgroup.Limits) error { return p.putJob(g, l, 0) }

// putJob is put for a job of the session whose own uid is uid (0: none).
// Memory still charged to g once it is empty is held by a process outside
// it, which only another process of the session can be (it was passed a
// memfd or a /dev/shm file over a Unix socket, or kernel memory: pipes the
// job filled, a descriptor of its /tmp): that memory counts against
// no limit while it lives, and no process's size shows it to the kernel's
// OOM killer. Where the session has a uid of its own, every process of it
// is killed (its other jobs and contexts end), which frees the memory.
func (p *cgroupPool) putJob(g *cgroup.Group, l cgroup.Limits, uid int) error {
	l = p.withTCP(l)
	if err := g.Kill(); err != nil {
		return errors.Join(err, g.Remove())
	}
	// Held and Kernel are parts of the group's whole charge: where that is
	// within the bound (a job that left nothing, most of them), neither
	// can pass it, and memory.stat, whose read flushes every CPU's
	// counters, is not read.
	var held int64
	if c, ok := g.Charged(); !ok || c > heldMax {
		if held = settleHeld(g); held <= heldMax {
			held = settleKernel(g)
		}
	}
	if held > heldMax {
		// The next job, another session's maybe, would start with it
		// counted against its limit: the group goes.
		he := &heldError{held: held, uid: uid}
		if p.killUID != nil && uid > 0 {
			he.killed = p.killUID(uid)
		}
		return errors.Join(he, g.Remove())
	}
	base := g.Usage()
	p.mu.Lock()
	if len(p.free) < p.max {
		p.free = append(p.free, freeGroup{g: g, base: base, limits: l})
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	return g.Remove()
}

// prepareLimits applies the job's limits to spec: rlimits always, and in a
// sandbox the confinement (uid, directories, cgroup). disk is the session's
// file system, nil when its disk limit is measured.
func (w *Worker) prepareLimits(job *wire.Job, set limits.Set, spec *runner.Spec, cwd, scripts string, uid int, disk *sessionDisk) (*jobLimits, error) {
	jl := &jobLimits{set: set}
	if w.box != nil {
		gid := uid
		if w.box.Rootless() {
			gid = os.Getgid()
		}
		c := &runner.Confinement{
			UID: uid, GID: gid,
			Binds:   []runner.Bind{{Path: cwd, Write: true}, {Path: scripts}},
			TmpSize: set.Disk,
			Session: job.Scope,
		}
		if w.cgroups != nil {
			g, base, err := w.cgroupPool.get(cgroupLimits(set))
			if err != nil {
				return nil, fmt.Errorf("job cgroup: %w", err)
			}
			jl.pool, jl.group, jl.base = w.cgroupPool, g, base
			if !w.box.Rootless() {
				jl.uid = uid
			}
			c.Cgroups, c.Unmount = g.ProcsFiles(), w.cgroups.Dirs()
		}
		spec.Confine = c
	}
	rl := set
	if disk == nil && set.Disk > 0 && (set.FileSize == 0 || set.Disk < set.FileSize) {
		// No single file may outgrow the working directory's limit: the
		// disk watch only samples, a file size limit stops the write. (A
		// session file system stops it itself.)
		rl.FileSize = set.Disk
	}
	// A GPU job's memory limit is its cgroup's or none: CUDA reserves
	// address space far beyond any memory it uses, so that RLIMIT_AS of 8
	// GiB failed CUDA's start on an H200 ("out of memory" at the first
	// cudaGetDeviceCount), and the default 1 GiB even the import of torch.
	// setupGPUs warns when the worker has no cgroups.
	spec.Rlimits = rl.Rlimits((jl.group != nil && set.Memory > 0) || job.GPU != nil)
	if job.GPU != nil {
		// A GPU job keeps the worker's RLIMIT_MEMLOCK: GPU libraries pin
		// host memory for transfers, and no GPU machine has run a job
		// without it. Its sandbox is its own (gpu.md).
		spec.Rlimits = slices.DeleteFunc(spec.Rlimits, func(r runner.Rlimit) bool { return r.Resource == unix.RLIMIT_MEMLOCK })
	}
	if (w.box == nil || w.box.Rootless()) && os.Geteuid() != 0 {
		// RLIMIT_NPROC counts every process of the uid on the host: the
		// worker's, and its user's, not the job's alone. Without a cgroup
		// it is still the only brake on a fork bomb, so it gets the job's
		// limit on top of what the uid runs now. (Root ignores it.)
		spec.Rlimits = slices.DeleteFunc(spec.Rlimits, func(r runner.Rlimit) bool { return r.Resource == unix.RLIMIT_NPROC })
		if jl.group == nil && set.Procs > 0 {
			n := uint64(set.Procs + int64(uidProcesses(os.Getuid())))
			spec.Rlimits = append(spec.Rlimits, runner.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
		}
	}
	return jl, nil
}

// uidProcesses counts the processes and threads of uid on the host, as
// RLIMIT_NPROC counts them.
func uidProcesses(uid int) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name(), &st) == nil && int(st.Uid) == uid {
			if tasks, err := os.ReadDir("/proc/" + e.Name() + "/task"); err == nil {
				n += len(tasks)
			} else {
				n++
			}
		}
	}
	return n
}

// settleMax bounds how long a job's cgroup is left to empty by itself
// before it is emptied and pooled (settle).
const settleMax = 100 * time.Millisecond

// settle waits for g to empty by itself, reading one small file (Tasks)
// after pauses that double from half a millisecond, at most settleMax.
// The job's process exits at once, but the keeper that tears its memory
// down (zygote.py: _keep_address_space) dies when the zygote kills the
// job's namespace, once it has the status, and takes from one to a few
// milliseconds to, more when the CPUs are busy. Emptying the group
// meanwhile (put: three cgroup.procs files read, the processes signalled,
// again after each pause) cost the worker 0.7 ms of CPU per job with 8
// callers (a Go profile: 16% of the process). It runs off the job's path.
func settle(g *cgroup.Group) {
	pause := 500 * time.Microsecond
	for waited := time.Duration(0); waited < settleMax; waited += pause {
		time.Sleep(pause)
		if n, ok := g.Tasks(); !ok || n == 0 {
			return
		}
		pause = min(2*pause, 16*time.Millisecond)
	}
}

// release gives the job's cgroup back, killing whatever is left in it.
func (jl *jobLimits) release(log interface{ Warn(string, ...any) }) {
	if jl.group != nil {
		settle(jl.group)
		if err := jl.pool.putJob(jl.group, cgroupLimits(jl.set), jl.uid); err != nil {
			if he := (*heldError)(nil); errors.As(err, &he) {
				log.Warn("job cgroup not reused: its job's memory is held outside it", "held_bytes", he.held, "err", err)
			} else {
				log.Warn("job cgroup not emptied", "err", err)
			}
		}
	}
	if jl.after != nil {
		jl.after()
	}
}

// errDiskLimit is the cause of a job's cancellation by the disk watch.
var errDiskLimit = errors.New("disk limit")

// watchDisk cancels the job when its session's working directory uses
// more than limit bytes, checking every interval until ctx ends. The
// directory is measured, not quota-limited: a job can pass the limit by
// what it writes in one interval (bounded by the file size limit per
// file). A directory that takes long to measure (many files) is measured
// less often, at most a tenth of the time.
func watchDisk(ctx context.Context, cancel context.CancelCauseFunc, dir string, limit int64, interval time.Duration) {
	if limit <= 0 {
		return
	}
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			start := time.Now()
			if DiskUsage(dir) > limit {
				cancel(errDiskLimit)
				return
			}
			t.Reset(max(interval, 10*time.Since(start)))
		}
	}
}

// minFileUsage is what every file and directory counts for at least: a
// job that makes millions of empty files uses the file system's inodes,
// not its blocks.
const minFileUsage = 4096

// DiskUsage is the space the files under dir take on disk (allocated
// blocks, so sparse files count what they use, and at least minFileUsage
// each), links not followed. It walks the tree by descriptors, one name at
// a time, so that no depth hides a directory from it: a path name is
// limited to PATH_MAX, a tree is not, and a walk by path names once saw
// nothing below 4096 bytes of nesting. A tree that keeps moving under the
// walk (a directory on the way renamed away, three times over) counts as
// unbounded: the job that does it gets no free pass.
func DiskUsage(dir string) int64 {
	for range 3 {
		var total int64
		err := walkTree(dir, func(_ *os.File, _ string, st *unix.Stat_t) {
			total += max(st.Blocks*512, minFileUsage)
		}, nil)
		if !errors.Is(err, errTreeMoved) {
			return total
		}
	}
	return math.MaxInt64
}

// walkBuf is the size of the buffer walkTree reads a directory's entries
// into: what it holds of them at most, per level of depth.
const walkBuf = 2048

// errTreeMoved says a directory of the tree being walked was moved while
// the walk was below it.
var errTreeMoved = errors.New("a directory moved during the walk")

// walkTree visits what lies under root, root included, without following
// links, holding two descriptors at most whatever the depth: going down
// it closes the parent, coming back up it opens the child's "..", and
// checks that it is the directory it left. pre is called with every entry
// (root: parent nil) before its directory's contents; post, if not nil,
// with every entry after them (a directory's last), with its parent
// open: the time to remove it. A directory that cannot be read is skipped.
func walkTree(root string, pre, post func(parent *os.File, name string, st *unix.Stat_t)) error {
	var st unix.Stat_t
	if err := unix.Lstat(root, &st); err != nil {
		return err
	}
	unlock(nil, root, &st)
	top, err := openDir(nil, root)
	if err != nil {
		return err
	}
	if err := unix.Fstat(int(top.Fd()), &st); err != nil {
		top.Close()
		return err
	}
	pre(nil, root, &st)
	// Each directory is read a getdents buffer at a time, never whole: a
	// job can put millions of names in one (hard links of an empty file
	// take no disk), and the walk runs every 100 ms while it runs. Where
	// the next batch starts is kept as the directory's offset, since
	// coming back up reopens it.
	type frame struct {
		names    []string
		off      int64
		eof      bool
		dev, ino uint64
	}
	cur := top
	buf := make([]byte, walkBuf)
	fill := func(f *frame) {
		for len(f.names) == 0 && !f.eof {
			fd := int(cur.Fd())
			if _, err := unix.Seek(fd, f.off, io.SeekStart); err != nil {
				f.eof = true
				return
			}
			n, err := unix.Getdents(fd, buf)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n <= 0 {
				f.eof = true // a directory that cannot be read is skipped
				return
			}
			if f.off, err = unix.Seek(fd, 0, io.SeekCurrent); err != nil {
				f.eof = true
			}
			_, _, f.names = unix.ParseDirent(buf[:n], -1, f.names[:0])
		}
	}
	stack := []frame{{dev: st.Dev, ino: st.Ino}}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		fill(f)
		if len(f.names) == 0 {
			stack = stack[:len(stack)-1]
			if len(stack) == 0 {
				break
			}
			// Back up: the parent, checked to be the one left.
			parent, err := openDir(cur, "..")
			if err == nil {
				err = unix.Fstat(int(parent.Fd()), &st)
			}
			cur.Close()
			if err != nil {
				return err
			}
			cur = parent
			if p := stack[len(stack)-1]; st.Dev != p.dev || st.Ino != p.ino {
				cur.Close()
				return errTreeMoved
			}
			if post != nil {
				name := stack[len(stack)-1].names[0]
				if unix.Fstatat(int(cur.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
					post(cur, name, &st)
				}
			}
			stack[len(stack)-1].names = stack[len(stack)-1].names[1:]
			continue
		}
		name := f.names[0]
		if unix.Fstatat(int(cur.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			f.names = f.names[1:]
			continue
		}
		pre(cur, name, &st)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			unlock(cur, name, &st)
			child, err := openDir(cur, name)
			var cst unix.Stat_t
			if err == nil && unix.Fstat(int(child.Fd()), &cst) == nil && cst.Dev == st.Dev && cst.Ino == st.Ino {
				// Down: the name stays at the head of f.names until
				// the child is done, for post.
				cur.Close()
				cur = child
				stack = append(stack, frame{dev: cst.Dev, ino: cst.Ino})
				continue
			}
			if child != nil {
				child.Close()
			}
		}
		if post != nil {
			post(cur, name, &st)
		}
		f.names = f.names[1:]
	}
	return cur.Close()
}

// unlock gives the owner of the directory name (relative to dir, or as is
// when dir is nil) back the access a job took from it with chmod, when
// that owner is this process: without root the worker is its jobs' uid,
// and a directory of mode 000 would hide what it holds from the walk, and
// from trimWorkspace. Root reads and removes whatever the mode. The
// directory is opened without following a link, checked to be the one
// st describes, and changed through its descriptor.
func unlock(dir *os.File, name string, st *unix.Stat_t) {
	euid := os.Geteuid()
	if euid == 0 || int(st.Uid) != euid || st.Mode&0o700 == 0o700 {
		return
	}
	at := unix.AT_FDCWD
	if dir != nil {
		at = int(dir.Fd())
	}
	fd, err := unix.Openat(at, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	var now unix.Stat_t
	if unix.Fstat(fd, &now) != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return
	}
	// fchmod refuses an O_PATH descriptor; its /proc name does not.
	if unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), now.Mode&0o7777|0o700) == nil {
		st.Mode |= 0o700
	}
}

// openDir opens the directory name (relative to dir, or as is when dir is
// nil), not following a link.
func openDir(dir *os.File, name string) (*os.File, error) {
	at := unix.AT_FDCWD
	if dir != nil {
		at = int(dir.Fd())
	}
	fd, err := unix.Openat(at, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// trimWorkspace brings a working directory that a job left over its disk
// limit back under it: it removes every file, link and directory that
// changed since the job started (by its ctime, which no job can set back),
// deepest first. A sampled limit lets a job write past it between two
// samples (a fallocate is instant), and what it wrote then stayed: the
// next call found the workspace over its limit before it began. What was
// there before the call, unchanged, stays. It reports whether the
// directory is under the limit afterwards.
func trimWorkspace(dir string, since time.Time, limit int64) bool {
	if limit <= 0 || DiskUsage(dir) <= limit {
		return true
	}
	// File times come from the kernel's coarse clock, a tick behind.
	since = since.Add(-coarseClockLag)
	changed := func(st *unix.Stat_t) bool { return !time.Unix(st.Ctim.Unix()).Before(since) }
	// A directory's own ctime changes when its entries are removed: what
	// counts is the one it had before the walk went in.
	before := map[[2]uint64]bool{}
	pre := func(_ *os.File, _ string, st *unix.Stat_t) {
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			before[[2]uint64{st.Dev, st.Ino}] = changed(st)
		}
	}
	post := func(parent *os.File, name string, st *unix.Stat_t) {
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if changed(st) {
				_ = unix.Unlinkat(int(parent.Fd()), name, 0)
			}
		} else if before[[2]uint64{st.Dev, st.Ino}] {
			_ = unix.Unlinkat(int(parent.Fd()), name, unix.AT_REMOVEDIR) // when empty
		}
	}
	// Again when a pass left it over (a directory read in batches while
	// its entries went may list some of them only in another pass), or
	// the tree moved under it; three passes at most.
	for range 3 {
		err := walkTree(dir, pre, post)
		if !errors.Is(err, errTreeMoved) && DiskUsage(dir) <= limit {
			return true
		}
	}
	return DiskUsage(dir) <= limit
}

// coarseClockLag is how far behind the time it reads a file's ctime may
// be: the kernel stamps files from a clock updated once per tick (1 to 10
// ms).
const coarseClockLag = 20 * time.Millisecond

// settleDisk finishes a job that ended on its disk limit: the workspace is
// trimmed back under the limit (trimWorkspace) and the verdict says what
// became of it. Other verdicts pass unchanged.
func settleDisk(v verdict, dir string, started time.Time, limit int64) verdict {
	if v.limit != wire.LimitDisk || limit <= 0 || DiskUsage(dir) <= limit {
		return v
	}
	if trimWorkspace(dir, started, limit) {
		v.message += "; what it wrote in this call was removed"
	} else {
		v.message += "; files from before this call keep the working directory over it"
	}
	return v
}
