// Package workspace turns a session's working directory into an archive and
// back, so that the directory's files outlive the worker that holds them.
//
// Pack writes a tar of the directory's directories, regular files and
// symbolic links (the links as links, never followed; a file's further
// names as hard links; anything else is left out), bounded in bytes,
// entries and path length. Unpack replaces the contents of a directory
// (never the directory itself: it may be a mount point) with an archive's,
// and treats the archive as hostile, since a job wrote every file in it:
// every entry is made by its last name in a descriptor of its directory,
// each directory on the way opened by its name in its parent's, no link
// followed, so no name, link or "..", absolute or not, reaches outside it
// (and an entry costs a few system calls however deep it is); only
// directories, regular files, symbolic links and hard links to files it
// made are created, with permission bits only (no setuid, setgid or sticky
// bit), owned by the uid and gid given; the files' bytes and the number of
// entries are bounded, and an archive without its end marker (cut off) fails. Manifest is a digest of the directory's tree, cheap
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
	"sync/atomic"
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
// through a link, fails the restore, as do files' bytes past maxBytes,
// entries past MaxEntries(maxBytes) and an archive that ends without tar's
// end marker. On failure dir may hold part of the
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
	top, err := root.Open(".")
	if err != nil {
		return fmt.Errorf("workspace: unpack: %w", err)
	}
	defer top.Close()
	u := newUnpacker(top, uid, gid, maxBytes)
	defer u.close()
	err = u.run(r)
	if hook := unpackOpened.Load(); hook != nil {
		(*hook)(dir, u.opens)
	}
	if err != nil {
		return fmt.Errorf("workspace: unpack: %w", err)
	}
	return nil
}

// unpackOpened, when set (tests), is told how many directories each
// Unpack opened on its way to its entries, with the directory it unpacked
// into.
var unpackOpened atomic.Pointer[func(dir string, n int)]

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

// An unpacker makes an archive's entries below its top directory. Every
// entry is made by its last name in a descriptor of its directory, that
// name never followed if it is a link, and each directory on the way is
// opened by its name in its parent's descriptor, O_NOFOLLOW: no name of the
// archive, and no link the archive made, leads outside the top.
//
// The descriptors of the directories of the last entry's path are kept
// (open, one per level, which MaxPath bounds, as a walk's are), and the
// next entry's path is resolved from the deepest of them that it is below:
// Pack writes a directory's entries right after it, so an entry costs a
// few system calls whatever its depth. Resolved from the top, each entry
// cost an open per level of its path, two or three times: a job that made
// 1,000 names 1,500 directories deep (3 KiB paths, within MaxPath, in a
// second through a descriptor of the deepest directory) left a snapshot
// of 10 MB whose restore took the worker, as root and outside every job's
// limits, 16 s of CPU; a snapshot of such names at the default disk
// limit (2 GiB) nearly an hour.
type unpacker struct {
	top      int // the directory the archive is unpacked into
	uid, gid int
	left     int64
	entries  int64
	// open holds the directories of the path resolved last, from the
	// top's child down: open[i] is below open[i-1].
	open []openDir
	// targets holds, for the files that hard links of the archive named,
	// a descriptor of the directory each is in (at most maxLinked, as
	// many as Pack names).
	targets map[string]int
	// mkdirs counts the directories this restore tried to make.
	mkdirs int
	// opens counts the directories it opened on the way to its entries.
	opens int
}

type openDir struct {
	name string // relative to the top
	fd   int
	// meta is the permissions and time of the directory's own entry,
	// given when it is closed: Pack writes a directory's entries right
	// after it, so they are all made by then (a read-only directory is
	// filled first, and its time is not changed after).
	meta *dirMeta
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

// newUnpacker unpacks into the directory top, which it uses, not owns.
func newUnpacker(top *os.File, uid, gid int, maxBytes int64) *unpacker {
	return &unpacker{top: int(top.Fd()), uid: uid, gid: gid, left: maxBytes, entries: MaxEntries(maxBytes)}
}

// close releases the descriptors the unpacker opened.
func (u *unpacker) close() {
	_ = u.keep(0)
	for _, fd := range u.targets {
		unix.Close(fd)
	}
	u.targets = nil
}

// keep closes the open directories past the first n, the deepest first,
// giving each the permissions and time of its entry.
func (u *unpacker) keep(n int) error {
	var err error
	for i := len(u.open) - 1; i >= n; i-- {
		d := u.open[i]
		if d.meta != nil {
			if cerr := unix.Fchmod(d.fd, uint32(d.meta.mode)); cerr != nil && err == nil {
				err = &fs.PathError{Op: "chmod", Path: d.name, Err: cerr}
			}
			parent := u.top
			if i > 0 {
				parent = u.open[i-1].fd
			}
			_ = setTimes(parent, path.Base(d.name), d.meta.mtime)
		}
		unix.Close(d.fd)
	}
	u.open = u.open[:n]
	return err
}

// run makes the entries of the archive r. The archive must end
// with its end marker (two zero blocks, which Pack writes last): tar.Reader
// takes an archive cut off between two entries, or empty, for a whole one,
// and such a restore succeeded with the session's later files, or all of
// them, missing.
func (u *unpacker) run(r io.Reader) error {
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	var next int64 // where the entry after the last one read starts
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if cr.n-next < 2*blockSize || !cr.zeroTail() {
				return fmt.Errorf("the archive ends without its end marker: %w", io.ErrUnexpectedEOF)
			}
			break
		}
		if err != nil {
			return err
		}
		next = cr.n
		if !headerOnly(hdr.Typeflag) {
			next += (hdr.Size + blockSize - 1) / blockSize * blockSize
		}
		if u.entries--; u.entries < 0 {
			return ErrTooLarge
		}
		if err := u.entry(tr, hdr); err != nil {
			return fmt.Errorf("%s: %w", strconv.Quote(hdr.Name), err)
		}
	}
	return u.keep(0)
}

// blockSize is a tar archive's block: a header, a file's bytes padded to
// it, two zero ones at the end.
const blockSize = 512

// headerOnly says whether an entry of type flag has no bytes after its
// header whatever its size says, as tar.Reader reads it.
func headerOnly(flag byte) bool {
	switch flag {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return true
	}
	return false
}

// countingReader counts the bytes read through it and keeps the last two
// blocks of them. It is no io.Seeker, so tar.Reader reads every byte it
// skips, and the count is where it is.
type countingReader struct {
	r    io.Reader
	n    int64
	tail [2 * blockSize]byte // the last bytes read, the latest at the end
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if got := p[:n]; len(got) >= len(c.tail) {
		copy(c.tail[:], got[len(got)-len(c.tail):])
	} else {
		copy(c.tail[:], c.tail[len(got):])
		copy(c.tail[len(c.tail)-len(got):], got)
	}
	return n, err
}

// zeroTail says whether the last two blocks read were zeros: the end
// marker, not a header or a PAX header's records that the archive was cut
// after.
func (c *countingReader) zeroTail() bool {
	return c.n >= int64(len(c.tail)) && c.tail == [2 * blockSize]byte{}
}

// entry creates one archive entry below the top.
func (u *unpacker) entry(tr *tar.Reader, hdr *tar.Header) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	perm := fs.FileMode(hdr.Mode).Perm() // setuid, setgid, sticky dropped
	switch hdr.Typeflag {
	case tar.TypeDir:
		// Its permissions and time are given when it is closed (keep),
		// not at the end: every directory's path held until then would
		// take the 250,000 directories with paths of 4 KiB that a job
		// may make under the default disk limit a GiB of the worker.
		if _, err := u.dir(name, true); err != nil {
			return err
		}
		u.open[len(u.open)-1].meta = &dirMeta{perm, hdr.ModTime}
		return nil
	case tar.TypeReg:
		return u.file(tr, name, hdr.Size, perm, hdr.ModTime)
	case tar.TypeSymlink:
		dir, base, err := u.parent(name, true)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, dir, base); err != nil {
			return &fs.PathError{Op: "symlink", Path: name, Err: err}
		}
		if err := lchown(dir, base, u.uid, u.gid); err != nil {
			return err
		}
		// The link's own time, as Pack recorded it (not its target's:
		// setTimes follows no link).
		if err := setTimes(dir, base, hdr.ModTime); err != nil {
			return &fs.PathError{Op: "chtimes", Path: name, Err: err}
		}
		return nil
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
	odir, obase, done, err := u.target(old)
	if err != nil {
		return err
	}
	defer done()
	var st unix.Stat_t
	if err := unix.Fstatat(odir, obase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lstat", Path: old, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("link to %s, not a file", strconv.Quote(target))
	}
	dir, base, err := u.parent(name, true)
	if err != nil {
		return err
	}
	err = unix.Linkat(odir, obase, dir, base, 0)
	if !errors.Is(err, syscall.EMLINK) {
		if err != nil {
			return &fs.PathError{Op: "link", Path: name, Err: err}
		}
		return nil
	}
	fd, err := unix.Openat(odir, obase, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: old, Err: err}
	}
	f := os.NewFile(uintptr(fd), old)
	defer f.Close()
	return u.file(f, name, st.Size, perm, mtime)
}

// target is a descriptor of the directory of old, the target of a hard
// link, and old's last name; done releases it. The open directories stay
// as they are (old is often elsewhere, the link's own directory next).
// The descriptors of the first maxLinked targets' directories are kept
// for the links that name them again.
func (u *unpacker) target(old string) (dir int, base string, done func(), err error) {
	base = path.Base(old)
	if fd, ok := u.targets[old]; ok {
		return fd, base, func() {}, nil
	}
	fd, err := u.lookup(path.Dir(old))
	if err != nil {
		return -1, "", nil, err
	}
	if len(u.targets) < maxLinked {
		if u.targets == nil {
			u.targets = map[string]int{}
		}
		u.targets[old] = fd
		return fd, base, func() {}, nil
	}
	return fd, base, func() { unix.Close(fd) }, nil
}

// cleanName accepts a relative path without "..", as Pack writes them.
// A name is bytes, as the file system has it, not text: fs.ValidPath,
// which wants UTF-8, refused a file named in Latin-1, and with it every
// restore of its session's snapshot. What keeps a name inside the top is
// that each of its parts is opened in its parent's descriptor, no link
// followed; this refuses what Pack never writes.
func cleanName(name string) (string, error) {
	clean := path.Clean(name)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "/") ||
		strings.ContainsRune(clean, 0) {
		return "", errors.New("not a relative path inside the workspace")
	}
	return clean, nil
}

// parent is a descriptor of the directory of name (clean, relative) and
// name's last part; the directories on the way are made when mk is set.
// The descriptor is the unpacker's, good until its next resolution.
func (u *unpacker) parent(name string, mk bool) (int, string, error) {
	fd, err := u.dir(path.Dir(name), mk)
	return fd, path.Base(name), err
}

// dir is a descriptor of the directory name (clean, relative; "." for the
// top), made, with those on its way, when mk is set and it is missing. It
// is resolved from the deepest open directory that name is at or below,
// one part at a time, none of them a link, and the directories of its
// path are then the open ones.
func (u *unpacker) dir(name string, mk bool) (int, error) {
	if name == "." {
		return u.top, nil
	}
	n := u.below(name)
	if err := u.keep(n); err != nil {
		return -1, err
	}
	fd, done := u.top, ""
	if n > 0 {
		fd, done = u.open[n-1].fd, u.open[n-1].name
	}
	if len(name) == len(done) {
		return fd, nil
	}
	// Each part's path is a prefix of name, sharing its bytes.
	for pos := len(done); pos < len(name); {
		if name[pos] == '/' {
			pos++
		}
		end := strings.IndexByte(name[pos:], '/')
		if end < 0 {
			end = len(name)
		} else {
			end += pos
		}
		part, full := name[pos:end], name[:end]
		pos = end
		if mk {
			if err := u.mkdir(fd, part); err != nil {
				return -1, &fs.PathError{Op: "mkdir", Path: full, Err: err}
			}
		}
		u.opens++
		cfd, err := openDirAt(fd, part, full)
		if err != nil {
			return -1, err
		}
		u.open = append(u.open, openDir{name: full, fd: cfd})
		fd, done = cfd, full
	}
	return fd, nil
}

// lookup is a new descriptor of the existing directory name (clean,
// relative), resolved as dir resolves it, leaving the open directories
// as they are.
func (u *unpacker) lookup(name string) (int, error) {
	fd, done := u.top, ""
	if name != "." {
		if n := u.below(name); n > 0 {
			fd, done = u.open[n-1].fd, u.open[n-1].name
		}
	}
	fd, err := unix.Dup(fd)
	if err != nil || name == "." || len(name) == len(done) {
		return fd, err
	}
	for part := range strings.SplitSeq(name[len(done):], "/") {
		if part == "" {
			continue
		}
		u.opens++
		cfd, err := openDirAt(fd, part, name)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = cfd
	}
	return fd, nil
}

// below is how many of the open directories name is at or below: they are
// a chain, each below the one before, so the deepest that is a prefix of
// name ending at a separator, and all before it.
func (u *unpacker) below(name string) int {
	n := len(u.open)
	if n == 0 {
		return 0
	}
	deepest := u.open[n-1].name
	common := 0
	for common < len(name) && common < len(deepest) && name[common] == deepest[common] {
		common++
	}
	for ; n > 0; n-- {
		p := u.open[n-1].name
		if len(p) <= common && (len(p) == len(name) || name[len(p)] == '/') {
			break
		}
	}
	return n
}

// openDirAt opens the directory name in dir, not through a link; full is
// its path, for errors.
func openDirAt(dir int, name, full string) (int, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("%s: exists and is not a directory", full)
	}
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: full, Err: err}
	}
	return fd, nil
}

// mkdir makes the directory name in parent, the session's, unless
// something is there already (dir then finds out what).
func (u *unpacker) mkdir(parent int, name string) error {
	u.mkdirs++
	err := unix.Mkdirat(parent, name, 0o700)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return err
	}
	return lchown(parent, name, u.uid, u.gid)
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
	dir, base, err := u.parent(name, true)
	if err != nil {
		return err
	}
	fd, err := unix.Openat(dir, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
	err = u.fill(f, tr, size, perm)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// A file cut short (the disk limit reached, the archive truncated)
		// is not the archive's file: it goes, so that what a failed
		// restore leaves is whole files only, and an empty one does not
		// count a block against a limit that held.
		_ = unix.Unlinkat(dir, base, 0)
		return err
	}
	if err := setTimes(dir, base, mtime); err != nil {
		return &fs.PathError{Op: "chtimes", Path: name, Err: err}
	}
	return nil
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

// lchown gives name in dir, not followed, to uid and gid.
func lchown(dir int, name string, uid, gid int) error {
	if err := unix.Fchownat(dir, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "lchown", Path: name, Err: err}
	}
	return nil
}

// setTimes sets name's (in dir, not followed) access and modification
// times to mtime.
func setTimes(dir int, name string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(dir, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
