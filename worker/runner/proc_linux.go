package runner

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

func supported() error { return nil }

func sysProcAttr() *syscall.SysProcAttr {
	inheritNothing()
	return &syscall.SysProcAttr{
		// The child leads a new process group whose id is its pid, so one
		// kill(-pid) reaches everything it starts (unless that calls setsid).
		Setpgid: true,
		// If the worker dies, the kernel kills the child: no orphans.
		Pdeathsig: syscall.SIGKILL,
	}
}

// waitExited blocks until the process pid has exited, without reaping it
// (WNOWAIT), so its pid stays reserved until cmd.Wait collects it.
func waitExited(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			// nil, or ECHILD if something else reaped it: either way it is gone.
			return
		}
	}
}

// killGroup sends SIGKILL to the process group pgid. A group that is already
// empty (ESRCH) is fine.
func killGroup(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
}

func exitStatus(ps *os.ProcessState) (code int, signal string) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal().String()
	}
	return ps.ExitCode(), ""
}

// setRlimits applies limits to process pid.
func setRlimits(pid int, limits []Rlimit) error {
	for _, r := range limits {
		rl := unix.Rlimit{Cur: r.Cur, Max: r.Max}
		if err := unix.Prlimit(pid, r.Resource, &rl, nil); err != nil {
			return fmt.Errorf("prlimit %d: %w", r.Resource, err)
		}
	}
	return nil
}

// NoCoreFiles is the limit that keeps a crashing job from dumping core:
// RLIMIT_CORE 1, soft and hard. 1, not 0: a core file needs at least a
// page, so neither writes one, but where the host's kernel.core_pattern is
// a pipe (systemd-coredump, apport, abrt: most distributions) the kernel
// ignores the limit and starts the pipe's program, as root in the host's
// namespaces and cgroup, and streams it the crashed process's memory,
// unless the limit is 1, the value by which it knows its own helpers. With
// 0, each job process that set itself dumpable (prctl) and crashed had the
// host start one such program, outside the job's process, memory and CPU
// limits (a test with a pipe that logs: uid 0, cgroup /, 18.7 MB of a
// Python job's memory each). 0 where this process's hard limit is 0, which
// a job's zygote, without CAP_SYS_RESOURCE, could not raise.
func NoCoreFiles() []Rlimit {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CORE, &rl); err == nil && rl.Max == 0 {
		return []Rlimit{{Resource: unix.RLIMIT_CORE}}
	}
	return []Rlimit{{Resource: unix.RLIMIT_CORE, Cur: 1, Max: 1}}
}

// inheritNothing marks every descriptor above 2 that this process holds
// close-on-exec, before each child it starts: a job, an interpreter or a
// sandbox. Go opens its own descriptors close-on-exec, but not those the
// worker inherited from what started it (a supervisor's pipe, a service
// manager's socket, a shell's descriptors) nor one made by a dup or by C
// code, and os/exec passes those on to every process it starts: an
// unsandboxed job would hold them, a sandbox would carry them inside. It
// costs tens of microseconds, beside an interpreter's start.
func inheritNothing() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC)
		}
	}
}
