// Package workspace turns a session's working directory into an archive and
// back, so that the directory's files outlive the worker that holds them.
//
// Pack writes a tar of the directory's directories, regular files and
// symbolic links (the links as links, never followed; anything else is left
// out), bounded in bytes. Unpack replaces the contents of a directory (never
// the directory itself: it may be a mount point) with an archive's, and
// treats the archive as hostile, since a job wrote every file in it: every
// entry is opened below the directory through an os.Root, so no name, link
// or "..", absolute or not, reaches outside it; only directories, regular
// files and symbolic links are created, with permission bits only (no
// setuid, setgid or sticky bit), owned by the uid and gid given; the files'
// bytes and the number of entries are bounded. Manifest is a digest of the
// directory's tree, cheap enough to tell after every job whether it changed.
package workspace

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ErrTooLarge is returned when a directory's or an archive's files hold more
// bytes, or more entries, than the limit allows.
var ErrTooLarge = errors.New("workspace: larger than its limit")

// maxEntries bounds the entries of a workspace of maxBytes: the disk limit
// counts every file as at least 4 KiB, so a workspace within it has no more
// than maxBytes/4 KiB of them, plus room for empty directories and links.
func maxEntries(maxBytes int64) int64 { return maxBytes/4096 + 4096 }

// Manifest returns a digest of dir's tree: every entry's path, type,
// permissions, size, modification and change times and inode, links not
// followed. Two equal manifests mean (to the file system's time
// resolution) that nothing was written, created, removed, renamed or
// chmod'ed in between. An empty directory's manifest is "".
func Manifest(dir string) (string, error) {
	h := sha256.New()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		rel, _ := filepath.Rel(dir, p)
		var ino, ctime int64
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			ino, ctime = int64(st.Ino), st.Ctim.Nano()
		}
		fmt.Fprintf(h, "%q %d %d %d %d %d\n", rel, uint32(info.Mode()), info.Size(),
			info.ModTime().UnixNano(), ctime, ino)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("workspace: manifest: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Pack writes dir's contents to w as a tar archive: directories, regular
// files and symbolic links, with their permissions and modification times;
// sockets, pipes and devices are left out, owners are not recorded. It
// returns ErrTooLarge, with the archive incomplete, once the files' bytes
// would pass maxBytes or the entries maxEntries(maxBytes).
func Pack(dir string, w io.Writer, maxBytes int64) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("workspace: pack: %w", err)
	}
	defer root.Close()
	p := packer{root: root, tw: tar.NewWriter(w), left: maxBytes, entries: maxEntries(maxBytes)}
	if err := fs.WalkDir(root.FS(), ".", p.add); err != nil {
		return fmt.Errorf("workspace: pack: %w", err)
	}
	if err := p.tw.Close(); err != nil {
		return fmt.Errorf("workspace: pack: %w", err)
	}
	return nil
}

type packer struct {
	root    *os.Root
	tw      *tar.Writer
	left    int64 // bytes of file content still allowed
	entries int64 // entries still allowed
}

func (p *packer) add(name string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if name == "." {
		return nil
	}
	if p.entries--; p.entries < 0 {
		return ErrTooLarge
	}
	info, err := d.Info()
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), ModTime: info.ModTime(), Format: tar.FormatPAX}
	switch info.Mode().Type() {
	case fs.ModeDir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
		return p.tw.WriteHeader(hdr)
	case fs.ModeSymlink:
		target, err := p.root.Readlink(name)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return p.tw.WriteHeader(hdr)
	case 0:
		return p.addFile(hdr)
	default:
		return nil // sockets, pipes, devices: nothing a later job could use
	}
}

// addFile writes the regular file hdr.Name, opened without following a
// link: what is read is what was seen.
func (p *packer) addFile(hdr *tar.Header) error {
	f, err := p.root.OpenFile(hdr.Name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return nil
	}
	if p.left -= info.Size(); p.left < 0 {
		return ErrTooLarge
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	if err := p.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.CopyN(p.tw, f, info.Size())
	return err
}

// Unpack replaces the contents of dir with the archive read from r, owned
// by uid and gid. dir itself is kept (its inode, owner and mode). Entries
// other than directories, regular files and symbolic links are skipped;
// a name that is not a plain relative path, or that would reach outside dir
// through a link, fails the restore, as do files' bytes past maxBytes or
// entries past maxEntries(maxBytes). On failure dir may hold part of the
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
	u := unpacker{root: root, uid: uid, gid: gid, left: maxBytes, entries: maxEntries(maxBytes)}
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
func clear(root *os.Root) error {
	entries, err := fs.ReadDir(root.FS(), ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := root.RemoveAll(e.Name()); err != nil {
			return err
		}
	}
	return nil
}

type unpacker struct {
	root     *os.Root
	uid, gid int
	left     int64
	entries  int64
	dirs     []dirMeta // applied last, deepest first, so that a read-only directory is filled first
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
	default:
		return nil // hard links, devices, pipes: never made by Pack
	}
}

// cleanName accepts a relative path without "..", as Pack writes them.
func cleanName(name string) (string, error) {
	clean := path.Clean(name)
	if !fs.ValidPath(clean) || clean == "." {
		return "", errors.New("not a relative path inside the workspace")
	}
	return clean, nil
}

func (u *unpacker) mkdirAll(name string) error {
	if name == "." {
		return nil
	}
	if err := u.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	err := u.root.Mkdir(name, 0o700)
	if errors.Is(err, fs.ErrExist) {
		info, serr := u.root.Lstat(name)
		if serr != nil {
			return serr
		}
		if !info.IsDir() {
			return fmt.Errorf("%s: exists and is not a directory", name)
		}
		return nil
	}
	if err != nil {
		return err
	}
	return u.root.Lchown(name, u.uid, u.gid)
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
