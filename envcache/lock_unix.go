//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package envcache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is an flock on a lock file, held through one open file
// description. flock locks belong to the open file description, so a
// fileLock excludes other fileLocks of this process as well as other
// processes. Shared locks mark an environment in use; the exclusive lock
// is taken to build or to evict it.
type fileLock struct {
	f    *os.File
	path string
}

// openLock opens (creating) the lock file at path, without locking it.
func openLock(path string) (*fileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("envcache: open lock: %w", err)
	}
	return &fileLock{f: f, path: path}, nil
}

// tryLock takes the lock, shared or exclusive, if it can at once. Taking
// the other kind on a held lock converts it (not atomically: see flock(2)).
func (l *fileLock) tryLock(exclusive bool) (bool, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		err := unix.Flock(int(l.f.Fd()), how|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		default:
			return false, fmt.Errorf("envcache: lock %s: %w", l.path, err)
		}
	}
}

// lock takes the lock, waiting until ctx ends. It polls rather than
// blocks so that ctx can end the wait; builds take seconds, so the polling
// costs nothing that matters.
func (l *fileLock) lock(ctx context.Context, exclusive bool) error {
	delay := 2 * time.Millisecond
	for {
		ok, err := l.tryLock(exclusive)
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("envcache: waiting for lock %s: %w", l.path, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// close releases the lock, if held, and closes the file. Calling it again
// does nothing. A fileLock is used by one goroutine at a time.
func (l *fileLock) close() {
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// lockFile takes an exclusive flock on path, creating the file if needed,
// and returns the function that releases it.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	l, err := openLock(path)
	if err != nil {
		return nil, err
	}
	if err := l.lock(ctx, true); err != nil {
		l.close()
		return nil, err
	}
	return l.close, nil
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

// diskUsage returns the bytes the tree at dir occupies on disk, as du
// counts them: allocated blocks, each inode once (hard links within the
// tree count once; links to files outside it, such as uv's cache, count in
// full).
func diskUsage(dir string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := map[inode]bool{}
	return sumTree(dir, nil, func(st *syscall.Stat_t) int64 {
		// The conversions are needed where the widths differ (darwin, 32-bit).
		key := inode{uint64(st.Dev), uint64(st.Ino)}
		if seen[key] {
			return 0
		}
		seen[key] = true
		return int64(st.Blocks) * 512
	})
}

// ownBytes returns the disk the regular files under dir take that are
// linked nowhere else (one link): what removing dir frees. A missing dir
// holds nothing.
func ownBytes(dir string) (int64, error) {
	return sumTree(dir, func(d fs.DirEntry) bool { return d.Type().IsRegular() }, func(st *syscall.Stat_t) int64 {
		if st.Nlink != 1 {
			return 0
		}
		return int64(st.Blocks) * 512
	})
}

// sumTree adds up size of the entries under dir (dir included) that keep
// accepts (nil: all), without following links; an entry whose file system
// gives no stat_t counts its size. Entries that vanish during the walk,
// dir among them, count nothing.
func sumTree(dir string, keep func(fs.DirEntry) bool, size func(*syscall.Stat_t) int64) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if keep != nil && !keep(d) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			total += size(st)
		} else {
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// diskSpace returns the bytes available to unprivileged users and the size
// of the file system holding path, and its free and total inodes (0 where
// it has no fixed number); ok is false when it cannot tell.
func diskSpace(path string) (avail, total, freeFiles, files uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, 0, 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), uint64(st.Ffree), uint64(st.Files), true
}
