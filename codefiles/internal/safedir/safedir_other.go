//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package safedir

import (
	"errors"
	"fmt"
	"runtime"
)

var errUnsupported = fmt.Errorf("safedir: not supported on %s: %w", runtime.GOOS, errors.ErrUnsupported)

// Dir is an open directory below a trusted base; see the unix implementation.
type Dir struct{}

// Open is not supported on this platform.
func Open(string, bool, ...string) (*Dir, error) { return nil, errUnsupported }

// Path is empty on this platform.
func (*Dir) Path() string { return "" }

// Close is a no-op on this platform.
func (*Dir) Close() error { return nil }

// WriteFile is not supported on this platform.
func (*Dir) WriteFile(string, []byte) error { return errUnsupported }

// WriteAt is not supported on this platform.
func (*Dir) WriteAt(string, []byte, int64) error { return errUnsupported }

// Size is not supported on this platform.
func (*Dir) Size(string) (int64, error) { return 0, errUnsupported }

// Remove is not supported on this platform.
func (*Dir) Remove(string) error { return errUnsupported }
