package limits

import (
	"time"

	"github.com/codexec/codexec/worker/runner"
	"golang.org/x/sys/unix"
)

// Rlimits are the rlimits that enforce s in each process of a job:
// RLIMIT_CORE 1 always (runner.NoCoreFiles: no core file, and no
// core_pattern pipe program started for a crash); RLIMIT_RTPRIO and RLIMIT_NICE 0
// always, whatever the worker inherited (a service or container started
// with real-time priorities allowed would otherwise let a job's busy loop
// under SCHED_FIFO take every CPU of the host from everything not real-time,
// past any cgroup's CPU weight); RLIMIT_MEMLOCK 0 always, so that no job
// locks pages in memory (mlock, mlockall, MAP_LOCKED, SHM_LOCK): the page
// cache of a file stays charged to the group of the job that first read it,
// and pages a process of the session locked after that job ended could not
// be reclaimed from the group, which the worker hands to another session's
// job; CPU as RLIMIT_CPU, soft at the
// whole seconds rounded up and hard one second later (SIGXCPU, which Python
// does not catch by default, then SIGKILL); FileSize as RLIMIT_FSIZE;
// OpenFiles as RLIMIT_NOFILE; Procs as RLIMIT_NPROC (per uid, and ignored
// for root: the cgroup's pids limit is the one that holds); Memory as
// RLIMIT_AS only when cgroupMemory is false, that is when no cgroup limits
// the job's memory as a whole. Zero fields give no entry. Disk is not an
// rlimit: the worker enforces it.
func (s Set) Rlimits(cgroupMemory bool) []runner.Rlimit {
	out := append(runner.NoCoreFiles(), runner.Rlimit{Resource: unix.RLIMIT_RTPRIO}, runner.Rlimit{Resource: unix.RLIMIT_NICE},
		runner.Rlimit{Resource: unix.RLIMIT_MEMLOCK})
	add := func(res int, v uint64) {
		out = append(out, runner.Rlimit{Resource: res, Cur: v, Max: v})
	}
	if s.CPU > 0 {
		secs := uint64(s.CPU / time.Second)
		if s.CPU%time.Second != 0 {
			secs++
		}
		out = append(out, runner.Rlimit{Resource: unix.RLIMIT_CPU, Cur: secs, Max: secs + 1})
	}
	if s.FileSize > 0 {
		add(unix.RLIMIT_FSIZE, uint64(s.FileSize))
	}
	if s.OpenFiles > 0 {
		add(unix.RLIMIT_NOFILE, uint64(s.OpenFiles))
	}
	if s.Procs > 0 {
		add(unix.RLIMIT_NPROC, uint64(s.Procs))
	}
	if s.Memory > 0 && !cgroupMemory {
		add(unix.RLIMIT_AS, uint64(s.Memory))
	}
	return out
}
