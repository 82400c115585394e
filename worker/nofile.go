package worker

import (
	"math"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// capOpenFiles lowers the pool's maximum of open files (and a default above
// it) to this worker's hard RLIMIT_NOFILE. Zygotes and jobs inherit that
// hard limit and cannot raise it (they hold no CAP_SYS_RESOURCE, and the
// kernel's fs.nr_open bounds even root), so a job that asked for more than
// it, within a larger configured maximum, failed to set its own limit and
// ended with exit 126. Capped, such a call is refused up front with the
// real maximum in its message. A pool with no maximum (nofile=none) gets
// the hard limit as its maximum, for the same reason. Called once by
// Start, before any job; said in the log when it changes anything.
func (w *Worker) capOpenFiles() {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Max == unix.RLIM_INFINITY || rl.Max > math.MaxInt64 {
		return
	}
	hard := int64(rl.Max)
	if m := w.cfg.MaxLimits.OpenFiles; m == 0 || m > hard {
		w.log.Info("open files: the pool's maximum capped to this host's hard limit (RLIMIT_NOFILE), which jobs cannot exceed",
			"configured", m, "hard_limit", hard)
		w.cfg.MaxLimits.OpenFiles = hard
	}
	if d := w.cfg.Limits.OpenFiles; d > hard {
		w.log.Info("open files: the default capped to this host's hard limit (RLIMIT_NOFILE)", "configured", d, "hard_limit", hard)
		w.cfg.Limits.OpenFiles = hard
	}
}

// hostTaskBudget returns the process ids this host has (kernel.pid_max)
// or, where fewer, the threads it allows (kernel.threads-max): every
// process and thread of every job takes one of each, in the host's PID
// namespace as in the job's; 0 where they cannot be read.
var hostTaskBudget = func() int64 {
	read := func(name string) int64 {
		b, err := os.ReadFile(name)
		if err != nil {
			return 0
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 {
			return 0
		}
		return n
	}
	pids, threads := read("/proc/sys/kernel/pid_max"), read("/proc/sys/kernel/threads-max")
	if pids == 0 || threads > 0 && threads < pids {
		return threads
	}
	return pids
}

// hostTaskShare is the part of the host's process ids (hostTaskBudget)
// that the jobs and contexts of one worker may hold at once, all at the
// pool's maximum: a quarter, so that two workers of a host leave the host
// half of them.
const hostTaskShare = 4

// capProcesses lowers the pool's maximum of processes (and a default above
// it) so that every job and context the worker may hold at once (Concurrency
// plus MaxContexts), each at that maximum, take at most a quarter of the
// host's process ids and threads. Past the host's pid_max, every fork and
// thread of the host fails, root's included: with pid_max at 32,768 (the
// kernel's default where nothing raised it), eight jobs of one session at
// the default maximum of 4,096 processes took them all. A pool with no
// maximum (procs=none) gets the share as its maximum. Called once by
// Start, before any job; said in the log when it changes anything.
func (w *Worker) capProcesses() {
	budget := hostTaskBudget()
	holders := int64(w.cfg.Concurrency + w.cfg.MaxContexts)
	if budget <= 0 || holders <= 0 {
		return
	}
	share := max(budget/hostTaskShare/holders, 1)
	if m := w.cfg.MaxLimits.Procs; m == 0 || m > share {
		w.log.Info("processes: the pool's maximum capped to its jobs' and contexts' share of this host's process ids (kernel.pid_max, kernel.threads-max)",
			"configured", m, "cap", share, "host", budget, "jobs_and_contexts", holders)
		w.cfg.MaxLimits.Procs = share
	}
	if d := w.cfg.Limits.Procs; d == 0 || d > share {
		w.log.Info("processes: the default capped to the pool's maximum", "configured", d, "cap", share)
		w.cfg.Limits.Procs = share
	}
}
