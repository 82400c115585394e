//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package envcache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"
)

// fileLock is not available here: building environments needs flock.
type fileLock struct{}

func openLock(string) (*fileLock, error) {
	return nil, fmt.Errorf("envcache: building environments is not supported on %s", runtime.GOOS)
}

func (*fileLock) tryLock(bool) (bool, error)       { return false, fmt.Errorf("envcache: no flock") }
func (*fileLock) lock(context.Context, bool) error { return fmt.Errorf("envcache: no flock") }
func (*fileLock) close()                           {}

func lockFile(context.Context, string) (func(), error) {
	return nil, fmt.Errorf("envcache: building environments is not supported on %s", runtime.GOOS)
}

func killGroupOnCancel(cmd *exec.Cmd) { cmd.WaitDelay = 5 * time.Second }

// diskUsage sums file sizes: there is no portable block count.
func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if fi, err := d.Info(); err == nil {
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// ownBytes cannot tell links apart here: every file counts.
func ownBytes(dir string) (int64, error) {
	n, err := diskUsage(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	return n, err
}

// diskSpace cannot tell here.
func diskSpace(string) (avail, total, freeFiles, files uint64, ok bool) { return 0, 0, 0, 0, false }
