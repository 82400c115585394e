package worker

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
)

// runFacts is everything known about an execution job once its run has
// returned: what the runner reported, what the kernel counted, why the
// job's context ended, and the limits it ran under.
type runFacts struct {
	out runner.Outcome
	// err is the runner's error (nil when the disk watch, not a failure,
	// stopped the run).
	err   error
	usage cgroup.Usage // what the job's cgroup counted; zero without one
	set   limits.Set
	// cgroupMemory says the memory limit was a cgroup's, not an rlimit.
	cgroupMemory bool
	timeout      time.Duration // the job's wall-clock limit
	shutdown     bool          // the worker's context ended: it is stopping
	diskStopped  bool          // the disk watch stopped the job
	// diskUsage measures the working directory after the run; it is
	// called only when nothing before the disk limit explains the
	// outcome, and only with a disk limit.
	diskUsage func() int64
	// diskFull, with a session file system (nil without one), says
	// whether the job's part of it is full: the kernel refused its writes
	// at the disk limit.
	diskFull func() bool
}

// verdict is how a job's result reports its outcome.
type verdict struct {
	status  wire.Status
	limit   string // one of the wire.Limit* names, or ""
	message string
}

// started says the runner started the job's interpreter: a run that
// failed to start has no duration. Its result then carries no output.
func (f runFacts) started() bool { return f.err == nil || f.out.Duration != 0 }

// classify turns the facts of a run into its result's status, limit and
// message. It is pure but for f.diskUsage.
func classify(f runFacts) verdict {
	if !f.started() {
		return verdict{status: wire.StatusInternal, message: "start python: " + f.err.Error()}
	}
	// Which limit the kernel's evidence names, if any; used below only
	// when the job failed, or when the cgroup counted a limit it hit.
	hit, hitMsg := limitHit(f.out, f.usage, f.set, f.cgroupMemory)
	switch {
	case errors.Is(f.err, runner.ErrZygoteDied):
		return verdict{status: wire.StatusInternal, message: "the job was killed: the warm interpreter it ran in died; run it again"}
	case f.out.TimedOut:
		v := verdict{status: wire.StatusTimeout, message: fmt.Sprintf("timed out after %s; the process group was killed", f.timeout)}
		if hit != "" {
			// What kept it from finishing, e.g. a thread it could not start.
			v.limit, v.message = hit, v.message+"; before that: "+hitMsg
		}
		return v
	case f.shutdown:
		return verdict{status: wire.StatusInternal, message: "interrupted: the worker is shutting down"}
	case f.diskStopped || (f.diskFull == nil && f.set.Disk > 0 && f.diskUsage() > f.set.Disk):
		// Measured during the run, and once more after it: a job that
		// wrote past the limit between two samples is named too.
		return verdict{status: wire.StatusLimit, limit: wire.LimitDisk,
			message: fmt.Sprintf("disk limit reached (%s in the working directory): the job was killed or its files are over it", mib(f.set.Disk))}
	case f.usage.OOMKills > 0 || f.usage.PidsMaxHits > 0:
		// The kernel refused the job (or killed one of its processes) at
		// a limit, even if its main process carried on and exited 0.
		return verdict{status: wire.StatusLimit, limit: hit, message: hitMsg}
	case f.out.ExitCode != 0 || f.out.Signal != "":
		switch {
		case hit != "":
			return verdict{status: wire.StatusLimit, limit: hit, message: hitMsg}
		case f.diskFull != nil && f.set.Disk > 0 && (f.diskFull() || strings.Contains(string(f.out.Stderr), "[Errno 28] No space left on device")):
			// The job's own report of ENOSPC is not needed: its part of
			// the file system is full, and it failed. (A job that says
			// ENOSPC falsely only mislabels its own result.)
			return verdict{status: wire.StatusLimit, limit: wire.LimitDisk,
				message: fmt.Sprintf("disk limit reached (%s in the working directory): the file system refused writes past it", mib(f.set.Disk))}
		case f.out.Signal != "":
			return verdict{status: wire.StatusError, message: "killed by signal: " + f.out.Signal}
		default:
			return verdict{status: wire.StatusError, message: fmt.Sprintf("exit code %d", f.out.ExitCode)}
		}
	}
	return verdict{status: wire.StatusOK, message: "exit code 0"}
}

// limitHit names the limit a failed job ran into, with a message for the
// caller, or "" when its failure was its own. What the kernel reports is
// the evidence: the cgroup's counters, the signal of RLIMIT_CPU, the
// errors Python raises when an rlimit refuses a request.
func limitHit(out runner.Outcome, usage cgroup.Usage, set limits.Set, cgroupMemory bool) (name, msg string) {
	stderr := string(out.Stderr)
	switch {
	case usage.OOMKills > 0:
		return wire.LimitMemory, fmt.Sprintf("memory limit reached (%s): the job was killed", mib(set.Memory))
	case set.CPU > 0 && out.Signal == syscall.SIGXCPU.String():
		return wire.LimitCPU, fmt.Sprintf("CPU time limit reached (%s per process)", set.CPU)
	case usage.PidsMaxHits > 0:
		return wire.LimitProcesses, fmt.Sprintf("process limit reached (%d processes and threads)", set.Procs)
	case !cgroupMemory && set.Memory > 0 && strings.Contains(stderr, "MemoryError"):
		return wire.LimitMemory, fmt.Sprintf("memory limit reached (%s of address space per process)", mib(set.Memory))
	case set.Disk > 0 && (set.FileSize == 0 || set.Disk < set.FileSize) && strings.Contains(stderr, "[Errno 27] File too large"):
		return wire.LimitDisk, fmt.Sprintf("disk limit reached (%s in the working directory): a file reached it", mib(set.Disk))
	case set.FileSize > 0 && strings.Contains(stderr, "[Errno 27] File too large"):
		return wire.LimitFileSize, fmt.Sprintf("file size limit reached (%s per file)", mib(set.FileSize))
	case set.OpenFiles > 0 && strings.Contains(stderr, "[Errno 24] Too many open files"):
		return wire.LimitOpenFiles, fmt.Sprintf("open files limit reached (%d per process)", set.OpenFiles)
	case set.Procs > 0 && strings.Contains(stderr, "[Errno 11] Resource temporarily unavailable") &&
		(strings.Contains(stderr, "fork") || strings.Contains(stderr, "thread") || strings.Contains(stderr, "spawn")):
		return wire.LimitProcesses, fmt.Sprintf("process limit reached (%d processes and threads)", set.Procs)
	}
	return "", ""
}

// mib writes a size in MiB, the unit of the per-call limits.
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
