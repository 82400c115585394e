// Package workspace turns a session's working directory into an archive and
// back, so that the directory's files outlive the worker that holds them.
//
// Pack writes a tar of the directory's directories, regular files and
// symbolic links (the links as links, never followed; a file's further
// names as hard links; anything else is left out), bounded in bytes,
// entries and path length. Unpack replaces the contents of a directory
// (never the directory itself: it may be a mount point) with an archive's,
// and treats the archive as hostile, since a job wrote every file in it:
// every entry is opened below the directory through an os.Root, so no
// name, link or "..", absolute or not, reaches outside it; only
// directories, regular files, symbolic links and hard links to files it
// made are created, with permission bits only (no setuid, setgid or sticky
// bit), owned by the uid and gid given; the files' bytes and the number of
// entries are bounded. Manifest is a digest of the directory's tree, cheap
// enough to tell after every job whether it changed. None of them reads a
// directory whole: a job can put millions of names in one.
package workspace

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrTooLarge is returned when a directory's or an archive's files hold more
// bytes, or more entries, than the limit allows, or a path longer than
// MaxPath.
var ErrTooLarge = errors.New("workspace: larger than its limit")

// MaxEntries is the most entries a workspace of maxBytes may hold to be
// saved: the disk limit counts every file as at least 4 KiB, so a
// workspace within it has no more than maxBytes/4 KiB of them, plus room
// for empty directories and links; and never more than MaxEntriesCeiling,
// whatever the limit. Hard links are what it holds back: a job can make a
// million names for one empty file with little disk, and each name would
// cost the worker after every job (a manifest, an archive entry).
func MaxEntries(maxBytes int64) int64 {
	return min(max(maxBytes, 0)/4096+4096, MaxEntriesCeiling)
}

// MaxEntriesCeiling bounds MaxEntries.
const MaxEntriesCeiling = 1 << 20

// MaxPath is the longest path (relative to the workspace, in bytes) a
// saved workspace may hold: PATH_MAX, past which no program opens a file
// by its name anyway. It bounds the depth of the walks, and with it what
// they hold.
const MaxPath = 4096

// Manifest returns a digest of dir's tree: every entry's path, type,
// permissions, size, modification and change times and inode, links not
// followed. Two equal manifests mean (to the file system's time
// resolution) that nothing was written, created, removed, renamed or
// chmod'ed in between. An empty directory's manifest is "". The digest is
// a sum of one per entry, so the order in which directories list their
// entries (which no one sorts: a directory may hold millions) does not
// change it. It fails with ErrTooLarge past MaxEntries(maxBytes) entries
// or a path longer than MaxPath: such a workspace is not saved.
func Manifest(dir string, maxBytes int64) (string, error) {
	var sum [4]uint64
	n := 0
	err := walkDir(dir, MaxEntries(maxBytes), func(parent *frame, name string, st *unix.Stat_t) (bool, error) {
		n++
		h := sha256.New()
		h.Write(parent.id[:])
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(len(name)))
		h.Write(b[:])
		h.Write([]byte(name))
		for _, v := range []uint64{uint64(st.Mode), uint64(st.Size), uint64(st.Mtim.Nano()), uint64(st.Ctim.Nano()), st.Ino} {
			binary.LittleEndian.PutUint64(b[:], v)
			h.Write(b[:])
		}
		d := h.Sum(nil)
		for i := range sum {
			sum[i] += binary.LittleEndian.Uint64(d[8*i:])
		}
		return true, nil
	})
	if err != nil {
		return "", fmt.Errorf("workspace: manifest: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	out := make([]byte, 32)
	for i, v := range sum {
		binary.LittleEndian.PutUint64(out[8*i:], v)
	}
	return hex.EncodeToString(out), nil
}

// Pack writes dir's contents to w as a tar archive: directories, regular
// files and symbolic links, with their permissions and modification times;
// sockets, pipes and devices are left out, owners are not recorded. A
// file with more than one name is archived once, its other names as hard
// links to the first (for the first maxLinked such files; the others'
// names as copies, whose bytes count). It returns ErrTooLarge, with the
// archive incomplete, once the files' bytes and the entries' names would
// pass maxBytes, the entries MaxEntries(maxBytes), or a path MaxPath.
func Pack(dir string, w io.Writer, maxBytes int64) error {
	p := packer{tw: tar.NewWriter(w), left: maxBytes, links: map[[2]uint64]string{}}
	if err := walkDir(dir, MaxEntries(maxBytes), p.add); err != nil {
		return fmt.Errorf("workspace: pack: %w", err)
	}
	if err := p.tw.Close(); err != nil {
		return fmt.Errorf("workspace: pack: %w", err)
	}
	return nil
}

// maxLinked is how many files with several names Pack remembers, to
// archive their other names as links.
const maxLinked = 1024

type packer struct {
	tw    *tar.Writer
	left  int64                // bytes of file content and names still allowed
	links map[[2]uint64]string // device and inode of a file with several names: the first name archived
}

func (p *packer) add(parent *frame, name string, st *unix.Stat_t) (bool, error) {
	rel := parent.path(name)
	if p.left -= int64(len(rel)); p.left < 0 {
		return false, ErrTooLarge
	}
	mtime := time.Unix(st.Mtim.Unix())
	hdr := &tar.Header{Name: rel, Mode: int64(st.Mode & 0o777), ModTime: mtime, Format: tar.FormatPAX}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		return true, p.tw.WriteHeader(hdr)
	case unix.S_IFLNK:
		buf := make([]byte, MaxPath)
		n, err := unix.Readlinkat(parent.fd, name, buf)
		if err != nil {
			return false, err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, string(buf[:n])
		return false, p.tw.WriteHeader(hdr)
	case unix.S_IFREG:
		return false, p.addFile(parent, name, hdr)
	default:
		return false, nil // sockets, pipes, devices: nothing a later job could use
	}
}

// addFile writes the regular file name of parent, opened without following
// a link: what is read is what was seen.
func (p *packer) addFile(parent *frame, name string, hdr *tar.Header) error {
	fd, err := unix.Openat(parent.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), hdr.Name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil
	}
	if st.Nlink > 1 {
		key := [2]uint64{st.Dev, st.Ino}
		if first, ok := p.links[key]; ok {
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return p.tw.WriteHeader(hdr)
		}
		if len(p.links) < maxLinked {
			p.links[key] = hdr.Name
		}
	}
	if p.left -= st.Size; p.left < 0 {
		return ErrTooLarge
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.CopyN(p.tw, f, st.Size)
	return err
}

// Unpack replaces the contents of dir with the archive read from r, owned
// by uid and gid. dir itself is kept (its inode, owner and mode). Entries
// other than directories, regular files and symbolic links are skipped;
// a name that is not a plain relative path, or that would reach outside dir
// through a link, fails the restore, as do files' bytes past maxBytes or
// entries past MaxEntries(maxBytes). On failure dir may hold part of the
// archive: whole files, never one cut short.
func Unpack(r io.Reader, dir string, uid, gid int, maxBytes int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("workspace: unpack: %w", err)
	}
	defer root.Close()
	if err := clear(root); err != nil {
		return fmt.Errorf("workspace: unpack: clear %s: %w", dir, err)
	}
	u := unpacker{root: root, uid: uid, gid: gid, left: maxBytes, entries: MaxEntries(maxBytes)}
	if err := u.run(tar.NewReader(r)); err != nil {
		return fmt.Errorf("workspace: unpack: %w", err)
	}
	return nil
}

// Clear removes everything in dir, not dir itself (it may be a mount
// point), without following links: what Unpack does first, for a caller
// that must act between the old files' going and the archive's coming (a
// disk limit set on the emptied directory).
func Clear(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("workspace: clear: %w", err)
	}
	defer root.Close()
	if err := clear(root); err != nil {
		return fmt.Errorf("workspace: clear %s: %w", dir, err)
	}
	return nil
}

// clear removes everything in root's directory, not the directory itself.
// os.Root.RemoveAll does not follow links.
// The directory is read a few names at a time, each batch removed before
// the next is read (from its start again: what is left), so that a
// directory of millions of names, which a job can make, is never held
// whole; os.Root.RemoveAll reads what lies below in batches too.
func clear(root *os.Root) error {
	for {
		f, err := root.Open(".")
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(readDirChunk)
		f.Close()
		if len(names) == 0 {
			if err == nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		for _, name := range names {
			if err := root.RemoveAll(name); err != nil {
				return err
			}
		}
	}
}

type unpacker struct {
	root     *os.Root
	uid, gid int
	left     int64
	entries  int64
	dirs     []dirMeta // applied last, deepest first, so that a read-only directory is filled first
	// made holds the directories this restore made or found, so that
	// each is made once: making every ancestor of every entry again cost
	// a chain of d directories d³ steps of path resolution (a tree 600
	// deep, which a job makes in milliseconds, took minutes to restore).
	made map[string]struct{}
	// mkdirs counts the directories this restore tried to make.
	mkdirs int
}

type dirMeta struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

func (u *unpacker) run(tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if u.entries--; u.entries < 0 {
			return ErrTooLarge
		}
		if err := u.entry(tr, hdr); err != nil {
			return fmt.Errorf("%s: %w", strconv.Quote(hdr.Name), err)
		}
	}
	for i := len(u.dirs) - 1; i >= 0; i-- {
		d := u.dirs[i]
		if err := u.root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		_ = u.root.Chtimes(d.name, d.mtime, d.mtime)
	}
	return nil
}

// entry creates one archive entry below the root.
func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	perm := fs.FileMode(hdr.Mode).Perm() // setuid, setgid, sticky dropped
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := u.mkdirAll(name); err != nil {
			return err
		}
		u.dirs = append(u.dirs, dirMeta{name, perm, hdr.ModTime})
		return nil
	case tar.TypeReg:
		return u.file(tr, name, hdr.Size, perm, hdr.ModTime)
	case tar.TypeSymlink:
		if err := u.mkdirAll(path.Dir(name)); err != nil {
			return err
		}
		if err := u.root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		return u.root.Lchown(name, u.uid, u.gid)
	case tar.TypeLink:
		return u.link(name, hdr.Linkname, perm, hdr.ModTime)
	default:
		return nil // devices, pipes: never made by Pack
	}
}

// link makes name a second name of the regular file target, which an
// earlier entry of the archive made (the directory held nothing else):
// a link to anything else, a directory or a link, fails the restore. A
// file that has as many names as its file system allows gets a copy.
func (u *unpacker) link(name, target string, perm fs.FileMode, mtime time.Time) error {
	old, err := cleanName(target)
	if err != nil {
		return fmt.Errorf("link to %s: %w", strconv.Quote(target), err)
	}
	info, err := u.root.Lstat(old)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("link to %s, not a file", strconv.Quote(target))
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	err = u.root.Link(old, name)
	if !errors.Is(err, syscall.EMLINK) {
		return err
	}
	f, err := u.root.OpenFile(old, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return u.file(f, name, info.Size(), perm, mtime)
}

// cleanName accepts a relative path without "..", as Pack writes them.
// A name is bytes, as the file system has it, not text: fs.ValidPath,
// which wants UTF-8, refused a file named in Latin-1, and with it every
// restore of its session's snapshot. What keeps a name inside the root
// is the os.Root every entry is made through; this refuses what Pack
// never writes.
func cleanName(name string) (string, error) {
	clean := path.Clean(name)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "/") ||
		strings.ContainsRune(clean, 0) {
		return "", errors.New("not a relative path inside the workspace")
	}
	return clean, nil
}

func (u *unpacker) mkdirAll(name string) error {
	if name == "." {
		return nil
	}
	if _, ok := u.made[name]; ok {
		return nil
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	u.mkdirs++
	err := u.root.Mkdir(name, 0o700)
	if errors.Is(err, fs.ErrExist) {
		info, serr := u.root.Lstat(name)
		if serr != nil {
			return serr
		}
		if !info.IsDir() {
			return fmt.Errorf("%s: exists and is not a directory", name)
		}
		u.remember(name)
		return nil
	}
	if err != nil {
		return err
	}
	if err := u.root.Lchown(name, u.uid, u.gid); err != nil {
		return err
	}
	u.remember(name)
	return nil
}

// remember records that the directory name exists. Only this restore
// writes below the root, and it never replaces a directory, so what it
// made stays a directory.
func (u *unpacker) remember(name string) {
	if u.made == nil {
		u.made = map[string]struct{}{}
	}
	u.made[name] = struct{}{}
}

// file creates the regular file name (never through a link, never over
// an existing entry) with size bytes from tr.
func (u *unpacker) file(tr io.Reader, name string, size int64, perm fs.FileMode, mtime time.Time) error {
	if size < 0 {
		return errors.New("negative size")
	}
	if u.left -= size; u.left < 0 {
		return ErrTooLarge
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	f, err := u.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	err = u.fill(f, tr, size, perm)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A file cut short (the disk limit reached, the archive truncated)
		// is not the archive's file: it goes, so that what a failed
		// restore leaves is whole files only, and an empty one does not
		// count a block against a limit that held.
		_ = u.root.Remove(name)
		return err
	}
	return u.root.Chtimes(name, mtime, mtime)
}

// fill writes size bytes from tr to f and gives it its owner and mode.
func (u *unpacker) fill(f *os.File, tr io.Reader, size int64, perm fs.FileMode) error {
	if _, err := io.CopyN(f, tr, size); err != nil {
		return err
	}
	if err := f.Chown(u.uid, u.gid); err != nil {
		return err
	}
	return f.Chmod(perm)
}
