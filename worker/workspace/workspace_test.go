package workspace

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func pack(t *testing.T, dir string, max int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Pack(dir, &buf, max); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// archive builds a tar of hdrs, each regular file's content its Linkname
// field's stand-in: the body given.
type entry struct {
	hdr  tar.Header
	body string
}

func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func ids() (int, int) { return os.Getuid(), os.Getgid() }

func TestPackUnpackRoundTrip(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "a.txt"), "hello", 0o640)
	write(t, filepath.Join(src, "sub", "deep", "b.bin"), "\x00\x01binary", 0o600)
	write(t, filepath.Join(src, "run.sh"), "#!/bin/sh\n", 0o755)
	if err := os.Mkdir(filepath.Join(src, "empty"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(src, "a.txt"), old, old); err != nil {
		t.Fatal(err)
	}
	data := pack(t, src, 1<<20)

	dst := t.TempDir()
	write(t, filepath.Join(dst, "stale.txt"), "from before", 0o644)
	before, _ := os.Stat(dst)
	uid, gid := ids()
	if err := Unpack(bytes.NewReader(data), dst, uid, gid, 1<<20); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(dst)
	if !os.SameFile(before, after) {
		t.Error("the directory itself was replaced; only its contents may be")
	}
	if _, err := os.Lstat(filepath.Join(dst, "stale.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a file of the old contents survived the restore: %v", err)
	}
	if got := read(t, filepath.Join(dst, "a.txt")); got != "hello" {
		t.Errorf("a.txt = %q", got)
	}
	if got := read(t, filepath.Join(dst, "sub", "deep", "b.bin")); got != "\x00\x01binary" {
		t.Errorf("b.bin = %q", got)
	}
	for name, mode := range map[string]os.FileMode{"a.txt": 0o640, "run.sh": 0o755, "empty": 0o750 | fs.ModeDir, "sub/deep/b.bin": 0o600} {
		info, err := os.Lstat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", name, info.Mode(), mode)
		}
	}
	if info, _ := os.Stat(filepath.Join(dst, "a.txt")); !info.ModTime().Equal(old) {
		t.Errorf("a.txt modified at %v, want %v", info.ModTime(), old)
	}
	if target, err := os.Readlink(filepath.Join(dst, "link")); err != nil || target != "a.txt" {
		t.Errorf("link = %q, %v", target, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a fifo was archived: %v", err)
	}
}

func TestPackRefusesMoreThanTheLimit(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "big"), strings.Repeat("x", 2000), 0o644)
	if err := Pack(src, &bytes.Buffer{}, 1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Pack of 2000 bytes under a 1000-byte limit: %v, want ErrTooLarge", err)
	}
}

// A link in the workspace is archived as a link: Pack never reads what it
// points at, inside the workspace or out.
func TestPackDoesNotFollowLinks(t *testing.T) {
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "not the session's", 0o600)
	src := t.TempDir()
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(src, "s")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(src, "d")); err != nil {
		t.Fatal(err)
	}
	data := pack(t, src, 1<<20)
	if bytes.Contains(data, []byte("not the session's")) {
		t.Fatal("Pack followed a link out of the workspace")
	}
}

// Hostile archives: the job wrote every file of a snapshot, and whoever
// can write the object store could write one. Nothing may land outside the
// workspace, nor be anything but a plain file, directory or link.
func TestUnpackHostileArchives(t *testing.T) {
	cases := []struct {
		name    string
		entries []entry
		wantErr bool
	}{
		{"absolute path", []entry{{tar.Header{Name: "/OUT/abs", Typeflag: tar.TypeReg}, "x"}}, true},
		{"dot-dot", []entry{{tar.Header{Name: "../OUT-escaped", Typeflag: tar.TypeReg}, "x"}}, true},
		{"dot-dot inside", []entry{{tar.Header{Name: "a/../../OUT-escaped", Typeflag: tar.TypeReg}, "x"}}, true},
		{"file through a link to outside", []entry{
			{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/OUT"}, ""},
			{tar.Header{Name: "l/through-link", Typeflag: tar.TypeReg}, "x"},
		}, true},
		{"directory through a link to outside", []entry{
			{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/OUT"}, ""},
			{tar.Header{Name: "l/newdir/", Typeflag: tar.TypeDir}, ""},
		}, true},
		{"file over a link", []entry{
			{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/OUT/target"}, ""},
			{tar.Header{Name: "l", Typeflag: tar.TypeReg}, "overwritten"},
		}, true},
		{"hard link to outside", []entry{{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "/OUT/target"}, ""}}, true},
		{"hard link dot-dot", []entry{{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../out/target"}, ""}}, true},
		{"hard link through a link to outside", []entry{
			{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/OUT"}, ""},
			{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "l/target"}, ""},
		}, true},
		{"hard link to a link to outside", []entry{
			{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/OUT/target"}, ""},
			{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "l"}, ""},
		}, true},
		{"hard link to a directory", []entry{
			{tar.Header{Name: "d/", Typeflag: tar.TypeDir}, ""},
			{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "d"}, ""},
		}, true},
		{"hard link to nothing", []entry{{tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "none"}, ""}}, true},
		{"character device", []entry{{tar.Header{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, ""}}, false},
		{"block device", []entry{{tar.Header{Name: "disk", Typeflag: tar.TypeBlock, Devmajor: 7, Devminor: 0}, ""}}, false},
		{"fifo", []entry{{tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, ""}}, false},
		{"setuid file", []entry{{tar.Header{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o4755}, "x"}}, false},
		{"setgid sticky dir", []entry{{tar.Header{Name: "sg/", Typeflag: tar.TypeDir, Mode: 0o3777}, ""}}, false},
		{"more bytes than the limit", []entry{{tar.Header{Name: "big", Typeflag: tar.TypeReg}, strings.Repeat("x", 5000)}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			out, dir := filepath.Join(base, "out"), filepath.Join(base, "ws")
			for _, d := range []string{out, dir} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write(t, filepath.Join(out, "target"), "untouched", 0o644)
			for i := range c.entries { // point "OUT" at this case's outside directory
				h := &c.entries[i].hdr
				h.Name = strings.ReplaceAll(h.Name, "/OUT", out)
				h.Name = strings.ReplaceAll(h.Name, "../OUT", "../out")
				h.Linkname = strings.ReplaceAll(h.Linkname, "/OUT", out)
			}
			uid, gid := ids()
			err := Unpack(bytes.NewReader(archive(t, c.entries...)), dir, uid, gid, 4096)
			if c.wantErr && err == nil {
				t.Error("Unpack accepted it")
			}
			if !c.wantErr && err != nil {
				t.Errorf("Unpack: %v", err)
			}
			assertOnlyPlainEntries(t, dir)
			entries, _ := os.ReadDir(out)
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(out, "target"), &st); err != nil || st.Nlink != 1 {
				t.Errorf("the file outside the workspace got another name: %d names", st.Nlink)
			}
			if len(entries) != 1 || read(t, filepath.Join(out, "target")) != "untouched" {
				t.Errorf("the directory outside the workspace changed: %v", entries)
			}
			if _, err := os.Lstat(filepath.Join(base, "OUT-escaped")); err == nil {
				t.Error("a file was written beside the workspace")
			}
		})
	}
}

// assertOnlyPlainEntries fails unless everything below dir is a regular
// file, directory or link, without setuid, setgid or sticky bits.
func assertOnlyPlainEntries(t *testing.T, dir string) {
	t.Helper()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		info, err := d.Info()
		if err != nil {
			t.Error(err)
			return nil
		}
		m := info.Mode()
		if m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Errorf("%s: mode %v keeps a special bit", p, m)
		}
		switch m.Type() {
		case 0, fs.ModeDir, fs.ModeSymlink:
		default:
			t.Errorf("%s: mode %v is not a file, directory or link", p, m)
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 && !m.IsDir() {
			t.Errorf("%s: %d links", p, st.Nlink)
		}
		return nil
	})
}

// Restored files belong to the session's uid, whatever the archive says.
func TestUnpackOwnsFilesByTheSessionsUID(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("changing owners needs root")
	}
	const uid, gid = 2000012345, 2000012345
	data := archive(t,
		entry{tar.Header{Name: "d/", Typeflag: tar.TypeDir, Uid: 0, Gid: 0}, ""},
		entry{tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Uid: 0, Gid: 0}, "x"},
		entry{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f"}, ""},
		entry{tar.Header{Name: "implicit/f", Typeflag: tar.TypeReg}, "y"},
	)
	dir := t.TempDir()
	if err := Unpack(bytes.NewReader(data), dir, uid, gid, 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"d", "d/f", "l", "implicit", "implicit/f"} {
		info, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		st := info.Sys().(*syscall.Stat_t)
		if st.Uid != uid || st.Gid != gid {
			t.Errorf("%s: owned by %d:%d, want %d:%d", name, st.Uid, st.Gid, uid, gid)
		}
	}
}

// A restore that fails inside a file (here the archive ends in its bytes;
// in a worker, the session's disk limit) leaves the files before it whole
// and not that one: a file cut short is not the snapshot's, and an empty
// one would still count a block against the disk limit.
func TestUnpackLeavesNoFileCutShort(t *testing.T) {
	big := strings.Repeat("z", 64<<10)
	data := archive(t,
		entry{tar.Header{Name: "whole", Typeflag: tar.TypeReg}, "kept"},
		entry{tar.Header{Name: "d/cut", Typeflag: tar.TypeReg}, big},
	)
	cut := bytes.Index(data, []byte(big)) + 4096
	dir := t.TempDir()
	uid, gid := ids()
	err := Unpack(bytes.NewReader(data[:cut]), dir, uid, gid, 1<<20)
	if err == nil {
		t.Fatal("an archive ending inside a file unpacked without an error")
	}
	if got := read(t, filepath.Join(dir, "whole")); got != "kept" {
		t.Errorf("the whole file before it: %q", got)
	}
	if _, err := os.Lstat(filepath.Join(dir, "d", "cut")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the file cut short is left (lstat: %v)", err)
	}
}

func TestManifestSeesChanges(t *testing.T) {
	dir := t.TempDir()
	m0, err := Manifest(dir, 1<<30)
	if err != nil || m0 != "" {
		t.Fatalf("empty directory: %q, %v; want \"\"", m0, err)
	}
	write(t, filepath.Join(dir, "f"), "one", 0o644)
	m1, _ := Manifest(dir, 1<<30)
	if again, _ := Manifest(dir, 1<<30); again != m1 {
		t.Error("the manifest of an unchanged directory changed")
	}
	changes := []func(){
		func() { write(t, filepath.Join(dir, "f"), "one, longer", 0o644) },
		func() { write(t, filepath.Join(dir, "sub", "g"), "", 0o644) },
		func() { _ = os.Chmod(filepath.Join(dir, "f"), 0o600) },
		func() { _ = os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "f2")) },
		func() { _ = os.Remove(filepath.Join(dir, "sub", "g")) },
	}
	prev := m1
	for i, change := range changes {
		change()
		m, err := Manifest(dir, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		if m == prev {
			t.Errorf("change %d: manifest unchanged", i)
		}
		prev = m
	}
}

// BenchmarkSnapshotSmall measures what saving a small workspace costs a
// worker besides the store: the manifest, and the tar of 20 files of 1 KiB.
func BenchmarkSnapshotSmall(b *testing.B) {
	dir := b.TempDir()
	for i := 0; i < 20; i++ {
		if err := os.WriteFile(filepath.Join(dir, "f"+string(rune('a'+i))), bytes.Repeat([]byte("x"), 1024), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("manifest", func(b *testing.B) {
		for b.Loop() {
			if _, err := Manifest(dir, 1<<30); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pack", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := Pack(dir, &buf, 1<<30); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A job makes a chain of directories hundreds deep in milliseconds; its
// restore on another worker made every ancestor of every entry again, each
// through a path resolved from the root: a chain 600 deep took minutes,
// and failed the session's calls there. Each directory is made once.
func TestUnpackMakesEachDirectoryOnce(t *testing.T) {
	const depth = 300
	var entries []entry
	p := ""
	for i := range depth {
		p = path.Join(p, "d")
		entries = append(entries, entry{tar.Header{Name: p + "/", Typeflag: tar.TypeDir}, ""})
		entries = append(entries, entry{tar.Header{Name: p + "/f", Typeflag: tar.TypeReg}, strconv.Itoa(i)})
		// Entries whose directory the archive never lists make theirs.
		entries = append(entries, entry{tar.Header{Name: p + "/x/y/g", Typeflag: tar.TypeReg}, "g"})
	}
	dir := t.TempDir()
	top, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	uid, gid := ids()
	u := newUnpacker(top, uid, gid, 1<<20)
	defer u.close()
	if err := u.run(bytes.NewReader(archive(t, entries...))); err != nil {
		t.Fatal(err)
	}
	if want := 3 * depth; u.mkdirs > want {
		t.Errorf("%d directories made %d times", want, u.mkdirs)
	}
	if got := read(t, filepath.Join(dir, strings.Repeat("d/", depth)+"x/y/g")); got != "g" {
		t.Errorf("deepest file: %q", got)
	}
}

// A file's name is bytes, not text: Python writes open(b'caf\xe9.txt')
// and an old zip unpacks as much. Pack archived such names, and Unpack
// refused them (fs.ValidPath wants UTF-8): every restore of the session's
// snapshot failed, after clearing the directory, so its files never
// reached another worker, and were lost with the one that held them.
func TestPackUnpackNamesThatAreNotUTF8(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "caf\xe9.txt"), "latin-1", 0o644)
	write(t, filepath.Join(src, "d\xff\xfe", "inner"), "below", 0o600)
	if err := os.Link(filepath.Join(src, "caf\xe9.txt"), filepath.Join(src, "second\x80")); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	uid, gid := ids()
	if err := Unpack(bytes.NewReader(pack(t, src, 1<<20)), dst, uid, gid, 1<<20); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"caf\xe9.txt": "latin-1", "d\xff\xfe/inner": "below", "second\x80": "latin-1"} {
		if got := read(t, filepath.Join(dst, name)); got != want {
			t.Errorf("%q = %q, want %q", name, got, want)
		}
	}
}
