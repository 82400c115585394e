package worker

import (
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
)

// Every branch of classify, with the exact messages a caller sees.
func TestClassify(t *testing.T) {
	t.Parallel()
	set := limits.Set{Memory: 256 << 20, CPU: 30 * time.Second, Procs: 64, FileSize: 8 << 20, Disk: 100 << 20, OpenFiles: 128}
	ran := runner.Outcome{Duration: time.Second}
	exited := func(code int, stderr string) runner.Outcome {
		o := ran
		o.ExitCode, o.Stderr = code, []byte(stderr)
		return o
	}
	signalled := func(sig string) runner.Outcome {
		o := ran
		o.ExitCode, o.Signal = -1, sig
		return o
	}
	timedOut := signalled("killed")
	timedOut.TimedOut = true
	under := func() int64 { return 1 << 20 }
	over := func() int64 { return 101 << 20 }
	mustNotMeasure := func() int64 { panic("the working directory was measured") }
	tests := []struct {
		name string
		f    runFacts
		want verdict
	}{
		{"not started", runFacts{err: errors.New("runner: start /x: no such file"), set: set},
			verdict{wire.StatusInternal, "", "start python: runner: start /x: no such file"}},
		{"zygote died", runFacts{out: signalled("killed"), err: fmt.Errorf("zygote 12: %w", runner.ErrZygoteDied), set: set, diskUsage: mustNotMeasure},
			verdict{wire.StatusInternal, "", "the job was killed: the warm interpreter it ran in died; run it again"}},
		{"zygote died beats timeout", runFacts{out: timedOut, err: runner.ErrZygoteDied, set: set, timeout: time.Second, diskUsage: mustNotMeasure},
			verdict{wire.StatusInternal, "", "the job was killed: the warm interpreter it ran in died; run it again"}},
		{"timeout", runFacts{out: timedOut, set: set, timeout: 2 * time.Second, diskUsage: mustNotMeasure},
			verdict{wire.StatusTimeout, "", "timed out after 2s; the process group was killed"}},
		{"timeout with a limit hit", runFacts{out: timedOut, usage: cgroup.Usage{PidsMaxHits: 3}, set: set, timeout: 1500 * time.Millisecond, diskUsage: mustNotMeasure},
			verdict{wire.StatusTimeout, wire.LimitProcesses, "timed out after 1.5s; the process group was killed; before that: process limit reached (64 processes and threads)"}},
		{"timeout beats shutdown", runFacts{out: timedOut, set: set, timeout: time.Second, shutdown: true, diskUsage: mustNotMeasure},
			verdict{wire.StatusTimeout, "", "timed out after 1s; the process group was killed"}},
		{"shutdown", runFacts{out: signalled("killed"), err: errors.New("context canceled"), set: set, shutdown: true, diskStopped: true, diskUsage: mustNotMeasure},
			verdict{wire.StatusInternal, "", "interrupted: the worker is shutting down"}},
		{"disk watch stopped it", runFacts{out: signalled("killed"), set: set, diskStopped: true, diskUsage: mustNotMeasure},
			verdict{wire.StatusLimit, wire.LimitDisk, "disk limit reached (100 MiB in the working directory): the job was killed or its files are over it"}},
		{"over the disk limit after the run", runFacts{out: exited(0, ""), set: set, diskUsage: over},
			verdict{wire.StatusLimit, wire.LimitDisk, "disk limit reached (100 MiB in the working directory): the job was killed or its files are over it"}},
		// A session file system: the kernel held the limit, so its files
		// are never over it; a job that failed with its part full (or
		// that says ENOSPC) ended on it, one that exited 0 did not.
		{"session fs full, the job failed quietly", runFacts{out: exited(3, ""), set: set, diskUsage: mustNotMeasure, diskFull: func() bool { return true }},
			verdict{wire.StatusLimit, wire.LimitDisk, "disk limit reached (100 MiB in the working directory): the file system refused writes past it"}},
		{"session fs not full, the job says ENOSPC", runFacts{out: exited(1, "OSError: [Errno 28] No space left on device"), set: set, diskUsage: mustNotMeasure, diskFull: func() bool { return false }},
			verdict{wire.StatusLimit, wire.LimitDisk, "disk limit reached (100 MiB in the working directory): the file system refused writes past it"}},
		{"session fs full, the job exited 0", runFacts{out: exited(0, ""), set: set, diskUsage: mustNotMeasure, diskFull: func() bool { return true }},
			verdict{wire.StatusOK, "", "exit code 0"}},
		{"session fs not full, the job failed", runFacts{out: exited(3, "Traceback"), set: set, diskUsage: mustNotMeasure, diskFull: func() bool { return false }},
			verdict{wire.StatusError, "", "exit code 3"}},
		{"no disk limit: not measured", runFacts{out: exited(0, ""), set: limits.Set{}, diskUsage: mustNotMeasure},
			verdict{wire.StatusOK, "", "exit code 0"}},
		{"OOM kill, main process exited 0", runFacts{out: exited(0, ""), usage: cgroup.Usage{OOMKills: 1}, set: set, cgroupMemory: true, diskUsage: under},
			verdict{wire.StatusLimit, wire.LimitMemory, "memory limit reached (256 MiB): the job was killed"}},
		{"pids hit, main process exited 0", runFacts{out: exited(0, ""), usage: cgroup.Usage{PidsMaxHits: 1}, set: set, diskUsage: under},
			verdict{wire.StatusLimit, wire.LimitProcesses, "process limit reached (64 processes and threads)"}},
		{"exit code with an rlimit's MemoryError", runFacts{out: exited(1, "MemoryError\n"), set: set, diskUsage: under},
			verdict{wire.StatusLimit, wire.LimitMemory, "memory limit reached (256 MiB of address space per process)"}},
		{"MemoryError under a cgroup's memory limit is the job's own", runFacts{out: exited(1, "MemoryError\n"), set: set, cgroupMemory: true, diskUsage: under},
			verdict{wire.StatusError, "", "exit code 1"}},
		{"file too large", runFacts{out: exited(1, "OSError: [Errno 27] File too large"), set: set, diskUsage: under},
			verdict{wire.StatusLimit, wire.LimitFileSize, "file size limit reached (8 MiB per file)"}},
		{"too many open files", runFacts{out: exited(1, "OSError: [Errno 24] Too many open files"), set: set, diskUsage: under},
			verdict{wire.StatusLimit, wire.LimitOpenFiles, "open files limit reached (128 per process)"}},
		{"CPU time", runFacts{out: signalled(syscall.SIGXCPU.String()), set: set, diskUsage: under},
			verdict{wire.StatusLimit, wire.LimitCPU, "CPU time limit reached (30s per process)"}},
		{"signal", runFacts{out: signalled("segmentation fault"), set: set, diskUsage: under},
			verdict{wire.StatusError, "", "killed by signal: segmentation fault"}},
		{"exit code", runFacts{out: exited(3, "Traceback"), set: set, diskUsage: under},
			verdict{wire.StatusError, "", "exit code 3"}},
		{"ok", runFacts{out: exited(0, ""), set: set, diskUsage: under},
			verdict{wire.StatusOK, "", "exit code 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(tt.f); got != tt.want {
				t.Errorf("classify = %+v\nwant       %+v", got, tt.want)
			}
		})
	}
}
