package cgroup

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// signal sends SIGKILL to pids, just read from l's cgroup.procs. One of
// them may exit and its number go to an unrelated process before the
// signal: a job that forks fast can make that likely, and the worker is
// root. A pidfd holds on to one process, so signal takes pidfds first,
// checks that their pids are still in the group, and signals through them.
func (l layout) signal(pids []int) error {
	fds := make(map[int]int, len(pids))
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd)
		}
	}()
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		switch {
		case err == nil:
			fds[pid] = fd
		case errors.Is(err, unix.ESRCH):
		case errors.Is(err, unix.ENOSYS):
			// Before Linux 5.3 there are no pidfds, and the race stays.
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
			return nil
		default:
			return fmt.Errorf("pidfd_open %d: %w", pid, err)
		}
	}
	still, err := l.procs()
	if err != nil {
		return err
	}
	for _, pid := range still {
		if fd, ok := fds[pid]; ok {
			if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pidfd_send_signal %d: %w", pid, err)
			}
		}
	}
	return nil
}
