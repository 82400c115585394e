//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package safedir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Dir is an open directory below a trusted base. Its methods act on names
// directly inside it and never follow a symbolic link. Close it when done.
type Dir struct {
	fd   int
	path string
}

// Open opens base, then each of elems below it in turn, creating missing
// ones with mode 0700 when create is true. It refuses an element that is a
// symbolic link or not a directory. A missing element with create false
// yields an error that matches os.ErrNotExist.
func Open(base string, create bool, elems ...string) (*Dir, error) {
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil && create && errors.Is(err, unix.ENOENT) {
		if err = os.MkdirAll(base, 0o700); err == nil {
			fd, err = unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		}
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: base, Err: err}
	}
	path := base
	for _, e := range elems {
		path = filepath.Join(path, e)
		if err := checkName(e); err != nil {
			_ = unix.Close(fd)
			return nil, err
		}
		next, err := openDirAt(fd, e, create)
		_ = unix.Close(fd)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		fd = next
	}
	return &Dir{fd: fd, path: path}, nil
}

func openDirAt(parent int, name string, create bool) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, name, flags, 0)
	if err != nil && create && errors.Is(err, unix.ENOENT) {
		if err = unix.Mkdirat(parent, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		fd, err = unix.Openat(parent, name, flags, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return -1, fmt.Errorf("%w (a symbolic link or not a directory; refusing to follow it)", err)
	}
	return fd, err
}

// Path is the directory's path as it was opened, for messages.
func (d *Dir) Path() string { return d.path }

// Close releases the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// WriteFile replaces name with a regular file holding data (mode 0600). It
// writes a temporary file and renames it over name, so readers see the old
// or the new content, and a symbolic link at name is replaced, not followed.
func (d *Dir) WriteFile(name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".tmp-" + hex.EncodeToString(rnd[:]) + "-" + name
	if len(tmp) > 255 {
		tmp = tmp[:255]
	}
	fd, err := unix.Openat(d.fd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return d.pathErr("create", tmp, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, tmp))
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(d.fd, tmp, d.fd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(d.fd, tmp, 0)
		return d.pathErr("write", name, err)
	}
	return nil
}

// WriteAt writes data at offset off of the regular file name, creating it
// (mode 0600) when missing. It refuses a symbolic link at name.
func (d *Dir) WriteAt(name string, data []byte, off int64) error {
	if err := checkName(name); err != nil {
		return err
	}
	fd, err := unix.Openat(d.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return d.pathErr("open", name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(d.path, name))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return d.pathErr("write", name, errors.New("not a regular file"))
	}
	_, err = f.WriteAt(data, off)
	return err
}

// Size returns the size of the regular file name, without following a
// symbolic link. A missing file matches os.ErrNotExist.
func (d *Dir) Size(name string) (int64, error) {
	if err := checkName(name); err != nil {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(d.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, d.pathErr("stat", name, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, d.pathErr("stat", name, errors.New("not a regular file"))
	}
	return st.Size, nil
}

// Remove removes name (a link is removed itself, never its target); a
// missing name is not an error.
func (d *Dir) Remove(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := unix.Unlinkat(d.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return d.pathErr("remove", name, err)
	}
	return nil
}

func (d *Dir) pathErr(op, name string, err error) error {
	if errors.Is(err, unix.ELOOP) {
		err = fmt.Errorf("%w (a symbolic link; refusing to follow it)", err)
	}
	return &os.PathError{Op: op, Path: filepath.Join(d.path, name), Err: err}
}
