package workspace

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// readDirChunk is how many names clear reads at once.
const readDirChunk = 256

// direntBuf is the size of the buffer a walk reads a directory's entries
// into: what one frame of the walk holds of them at most.
const direntBuf = 2048

// frame is a directory being walked: its descriptor, the names read from
// it and not yet visited, and what identifies it without its path.
type frame struct {
	fd     int
	parent *frame
	name   string   // its name in its parent; "" for the top
	plen   int      // length of its path relative to the top
	id     [32]byte // a digest of its path (the top's: zeros)
	names  []string
	eof    bool
}

// path is the slash-separated path of name, an entry of f, relative to the
// top of the walk.
func (f *frame) path(name string) string {
	parts := []string{name}
	for d := f; d.parent != nil; d = d.parent {
		parts = append(parts, d.name)
	}
	var b strings.Builder
	b.Grow(f.plen + 1 + len(name))
	for i := len(parts) - 1; i >= 0; i-- {
		b.WriteString(parts[i])
		if i > 0 {
			b.WriteByte('/')
		}
	}
	return b.String()
}

// fill reads f's next entries, when it has none left: one getdents, as
// many names as fit in buf.
func (f *frame) fill(buf []byte) error {
	for len(f.names) == 0 && !f.eof {
		n, err := unix.Getdents(f.fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			f.eof = true
			return nil
		}
		_, _, f.names = unix.ParseDirent(buf[:n], -1, f.names[:0])
	}
	return nil
}

// walkDir calls visit with every entry below dir (not dir itself), depth
// first, a directory before its contents, which are visited when visit
// returns true for it, all of them right after it (Unpack gives a
// directory its mode and time once it has left it for good); an error from visit ends the walk. No link is
// followed: every directory is opened by its name in its parent's
// descriptor, O_NOFOLLOW, and checked to be the one listed. Each directory
// is read a few entries at a time (getdents into a small buffer) and not
// sorted, so that the walk holds, whatever a directory holds, one
// descriptor and at most a buffer's worth of names per level of depth,
// which MaxPath bounds. It fails with ErrTooLarge after maxEntries
// entries, or at a path longer than MaxPath.
func walkDir(dir string, maxEntries int64, visit func(parent *frame, name string, st *unix.Stat_t) (bool, error)) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	stack := []*frame{{fd: fd}}
	defer func() {
		for _, f := range stack {
			unix.Close(f.fd)
		}
	}()
	buf := make([]byte, direntBuf)
	var entries int64
	var st unix.Stat_t
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if err := f.fill(buf); err != nil {
			return err
		}
		if len(f.names) == 0 {
			unix.Close(f.fd)
			stack = stack[:len(stack)-1]
			continue
		}
		name := f.names[0]
		f.names = f.names[1:]
		if entries++; entries > maxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, maxEntries)
		}
		plen := len(name)
		if f.parent != nil {
			plen += f.plen + 1
		}
		if plen > MaxPath {
			return fmt.Errorf("%w: a path longer than %d bytes", ErrTooLarge, MaxPath)
		}
		if err := unix.Fstatat(f.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // gone since it was listed
			}
			return err
		}
		descend, err := visit(f, name, &st)
		if err != nil {
			return err
		}
		if !descend || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := unix.Openat(f.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", f.path(name), err)
		}
		var cst unix.Stat_t
		if err := unix.Fstat(cfd, &cst); err != nil || cst.Dev != st.Dev || cst.Ino != st.Ino {
			unix.Close(cfd)
			return fmt.Errorf("%s: replaced while it was read", f.path(name))
		}
		child := &frame{fd: cfd, parent: f, name: name, plen: plen}
		child.id = sha256.Sum256(append(append(f.id[:], 0), name...))
		stack = append(stack, child)
	}
	return nil
}
