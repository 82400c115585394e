package runner

import (
	"errors"
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
