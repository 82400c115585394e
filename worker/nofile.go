package worker

import (
	"math"

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
