package runner

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

func supported() error { return nil }

func sysProcAttr() *syscall.SysProcAttr {
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

// NoCoreFiles is the limit that keeps a crashing job from writing a core
// file: RLIMIT_CORE 0.
func NoCoreFiles() []Rlimit { return []Rlimit{{Resource: unix.RLIMIT_CORE}} }
