//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package envcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// lockFile takes an exclusive flock on path, creating the file if needed, and
// returns the function that releases it. flock locks belong to an open file
// description, so the lock excludes other goroutines of this process as well
// as other processes. It polls rather than blocks so that ctx can end the
// wait; builds take seconds, so the polling costs nothing that matters.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("envcache: open lock: %w", err)
	}
	delay := 2 * time.Millisecond
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("envcache: lock %s: %w", path, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			f.Close()
			return nil, fmt.Errorf("envcache: waiting for lock %s: %w", path, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// killGroupOnCancel starts cmd in a process group of its own and makes ctx
// cancellation kill the whole group: an installer's children (ensurepip runs
// pip) must not survive it and keep its output pipe open.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
	}
	cmd.WaitDelay = 5 * time.Second
}
