package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
	"github.com/codexec/codexec/worker/seccomp"
)

// setupSandbox decides how this worker confines jobs (Config.Sandbox): it
// probes bubblewrap, and finds the cgroups that give memory and process
// limits their reach. It fails closed: unless the operator asked for
// --sandbox off, a machine without a working sandbox gets no worker (auto
// and require alike), since jobs run unconfined would run as the worker's
// user, root on most servers, and read what it can. With off, jobs run as
// the worker's user, and the worker says so.
func (w *Worker) setupSandbox(ctx context.Context) error {
	if name := strings.ToLower(w.cfg.Sandbox); name != SandboxOff {
		box, err := w.probeSandbox(ctx)
		if err != nil {
			return fmt.Errorf("worker: no working sandbox, and without one no job runs (--sandbox %s): %w. "+
				"Install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap) "+
				"where namespaces are allowed (a container needs them allowed: docker run --privileged, or a seccomp profile that permits unshare), "+
				"or pass --sandbox off to run jobs unconfined, as this worker's own user", name, err)
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
			w.cgroupPool = &cgroupPool{m: cg, max: 2 * w.cfg.Concurrency}
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
		}
		w.log.Info("sandbox ready", "bwrap", w.box.Version(), "network", w.box.Network(), "cgroups", w.cgroups != nil,
			"seccomp", filter != nil, "seccomp_allow", w.cfg.SeccompAllow)
	}
	return nil
}

func (w *Worker) probeSandbox(ctx context.Context) (*sandbox.Sandbox, error) {
	return sandbox.Probe(ctx, sandbox.Config{
		Bwrap:    w.cfg.Bwrap,
		Network:  strings.ToLower(w.cfg.JobNetwork) == NetworkAllow,
		ReadOnly: w.cfg.SandboxReadOnly, Devices: w.cfg.SandboxDevices,
	})
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
func (w *Worker) sessionDirs(scope string) (cwd, scripts string, uid int, err error) {
	cwd = filepath.Join(w.sessionsRoot(), scope)
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
	free []*cgroup.Group
	made int
}

func (p *cgroupPool) get(l cgroup.Limits) (*cgroup.Group, error) {
	p.mu.Lock()
	var g *cgroup.Group
	if n := len(p.free); n > 0 {
		g, p.free = p.free[n-1], p.free[:n-1]
	}
	p.made++
	name := fmt.Sprintf("job-%d", p.made)
	p.mu.Unlock()
	if g != nil {
		if err := g.Reset(l); err == nil {
			return g, nil
		}
		_ = g.Remove()
	}
	return p.m.New(name, l)
}

// put takes g back after its job, killing what is left in it; a group that
// cannot be emptied, or one too many, is removed.
func (p *cgroupPool) put(g *cgroup.Group) error {
	if err := g.Kill(); err != nil {
		return errors.Join(err, g.Remove())
	}
	p.mu.Lock()
	if len(p.free) < p.max {
		p.free = append(p.free, g)
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	return g.Remove()
}

// prepareLimits applies the job's limits to spec: rlimits always, and in a
// sandbox the confinement (uid, directories, cgroup).
func (w *Worker) prepareLimits(job *wire.Job, set limits.Set, spec *runner.Spec, cwd, scripts string, uid int) (*jobLimits, error) {
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
		}
		if w.cgroups != nil {
			g, err := w.cgroupPool.get(cgroup.Limits{MemoryBytes: set.Memory, Pids: set.Procs})
			if err != nil {
				return nil, fmt.Errorf("job cgroup: %w", err)
			}
			jl.pool, jl.group, jl.base = w.cgroupPool, g, g.Usage()
			c.Cgroups, c.Unmount = g.ProcsFiles(), w.cgroups.Dirs()
		}
		spec.Confine = c
	}
	rl := set
	if set.Disk > 0 && (set.FileSize == 0 || set.Disk < set.FileSize) {
		// No single file may outgrow the working directory's limit: the
		// disk watch only samples, a file size limit stops the write.
		rl.FileSize = set.Disk
	}
	spec.Rlimits = rl.Rlimits(jl.group != nil && set.Memory > 0)
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

// release gives the job's cgroup back, killing whatever is left in it.
func (jl *jobLimits) release(log interface{ Warn(string, ...any) }) {
	if jl.group != nil {
		if err := jl.pool.put(jl.group); err != nil {
			log.Warn("job cgroup not emptied", "err", err)
		}
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
// each), links not followed.
func DiskUsage(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				total += max(st.Blocks*512, minFileUsage)
			}
		}
		return nil
	})
	return total
}
