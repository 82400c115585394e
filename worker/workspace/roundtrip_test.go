package workspace

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// snapshotOf describes every entry below dir exactly, links not followed:
// type, permission bits, mtime to the nanosecond, bytes or link target, and
// which names share an inode.
func snapshotOf(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64][]string{}
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		line := fmt.Sprintf("%q type=%o perm=%o mtime=%d", rel, st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Mtim.Nano())
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" sha=%x", sha256.Sum256(data))
			if st.Nlink > 1 {
				inodes[st.Ino] = append(inodes[st.Ino], rel)
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" -> %q", target)
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, names := range inodes {
		sort.Strings(names)
		out = append(out, "linked "+strings.Join(names, " "))
	}
	sort.Strings(out)
	return out
}

// TestPackUnpackKeepsTheTreeExactly restores a tree with every kind of entry
// Pack writes and compares it entry by entry: bytes, permission bits (read-
// only and no-permission directories and files), times to the nanosecond
// (links' own too; a directory's after its children were made), link
// targets and which names are one file.
func TestPackUnpackKeepsTheTreeExactly(t *testing.T) {
	src := t.TempDir()
	mk := func(p string) {
		if err := os.Mkdir(filepath.Join(src, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mk("ro")
	write(t, filepath.Join(src, "ro", "f"), "in ro", 0o644)
	mk("ro/sub")
	write(t, filepath.Join(src, "ro", "sub", "g"), "deeper", 0o000)
	mk("none")
	write(t, filepath.Join(src, "none", "h"), "in none", 0o000)
	mk("empty")
	mk("wide")
	for i := range 300 {
		write(t, filepath.Join(src, "wide", fmt.Sprintf("f%03d", i)), fmt.Sprint(i), 0o644)
	}
	deep := "d"
	for i := range 60 {
		deep = filepath.Join(deep, fmt.Sprint(i))
	}
	write(t, filepath.Join(src, deep, "leaf"), "leaf", 0o600)
	write(t, filepath.Join(src, "weird\nname with space", "\xff\xfe"), "latin", 0o644)
	for _, l := range [][2]string{{"/etc/passwd", "abs"}, {"../../outside", "out"}, {"nowhere", "dangling"}, {"abs", "chain1"}, {"chain1", "chain2"}, {"ro", "dirlink"}} {
		if err := os.Symlink(l[0], filepath.Join(src, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	// Hard links in many places: a target deeper, shallower, in a sibling.
	write(t, filepath.Join(src, "m", "a", "target"), "linked bytes", 0o640)
	for _, n := range []string{"m/a/second", "m/b/third", "m/a/x/y/fourth", "top-link", "zz/last", "aa/first", "ro/linked"} {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(n)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(src, "m/a/target"), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(src, "m", "x", "y", "z", "deep-target"), "deep", 0o644)
	for _, n := range []string{"m/up", "deep-up", "m/x/sib"} {
		if err := os.Link(filepath.Join(src, "m/x/y/z/deep-target"), filepath.Join(src, n)); err != nil {
			t.Fatal(err)
		}
	}
	// Times last, deepest first, then modes.
	var all []string
	filepath.Walk(src, func(p string, _ os.FileInfo, _ error) error { all = append(all, p); return nil })
	for j := len(all) - 1; j > 0; j-- {
		when := time.Date(2021, 3, 4, 5, 6, 7, j*1000+7, time.UTC)
		_ = unix.UtimesNanoAt(unix.AT_FDCWD, all[j], []unix.Timespec{unix.NsecToTimespec(when.UnixNano()), unix.NsecToTimespec(when.UnixNano())}, unix.AT_SYMLINK_NOFOLLOW)
	}
	for p, m := range map[string]uint32{"ro/sub": 0o500, "ro": 0o500, "none": 0o000, "empty": 0o700, "wide": 0o555} {
		if err := unix.Fchmodat(unix.AT_FDCWD, filepath.Join(src, p), m, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { openUp(src) })
	want := snapshotOf(t, src)
	var buf bytes.Buffer
	if err := Pack(src, &buf, 1<<30); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	t.Cleanup(func() { openUp(dst) })
	uid, gid := ids()
	if err := Unpack(bytes.NewReader(buf.Bytes()), dst, uid, gid, 1<<30); err != nil {
		t.Fatal(err)
	}
	got := snapshotOf(t, dst)
	diff(t, want, got)
	// Again, over itself: a directory replaced by a file.
	if err := Unpack(bytes.NewReader(buf.Bytes()), dst, uid, gid, 1<<30); err != nil {
		t.Fatal(err)
	}
	diff(t, want, snapshotOf(t, dst))
}

// openUp lets the test's cleanup remove dir's read-only directories.
func openUp(dir string) {
	filepath.Walk(dir, func(p string, info os.FileInfo, _ error) error {
		if info != nil && info.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

// diff reports the entries only one of want and got has.
func diff(t *testing.T, want, got []string) {
	t.Helper()
	w := map[string]bool{}
	for _, l := range want {
		w[l] = true
	}
	g := map[string]bool{}
	for _, l := range got {
		g[l] = true
		if !w[l] {
			t.Errorf("got only: %s", l)
		}
	}
	for _, l := range want {
		if !g[l] {
			t.Errorf("want only: %s", l)
		}
	}
}

// TestUnpackRefusesTruncatedArchives cuts a snapshot at every block and
// inside some: each restore must fail. tar.Reader reads an archive cut
// between two entries (or an empty one) as a whole one, and such restores
// succeeded with the later files missing.
func TestUnpackRefusesTruncatedArchives(t *testing.T) {
	src := t.TempDir()
	write(t, filepath.Join(src, "a", "one"), "first file", 0o644)
	write(t, filepath.Join(src, "b", "two"), string(make([]byte, 1500)), 0o644) // ends in zero blocks
	write(t, filepath.Join(src, "c"), "", 0o644)
	if err := os.Symlink("c", filepath.Join(src, "d")); err != nil {
		t.Fatal(err)
	}
	data := pack(t, src, 1<<20)
	uid, gid := ids()
	if err := Unpack(bytes.NewReader(data), t.TempDir(), uid, gid, 1<<20); err != nil {
		t.Fatalf("the whole archive: %v", err)
	}
	var cuts []int
	for cut := 0; cut < len(data); cut += 512 {
		cuts = append(cuts, cut, cut+100)
	}
	restored := 0
	for _, cut := range cuts {
		if Unpack(bytes.NewReader(data[:cut]), t.TempDir(), uid, gid, 1<<20) == nil {
			restored++
			t.Errorf("cut after %d of %d bytes: restored without an error", cut, len(data))
		}
	}
	if restored > 0 {
		t.Errorf("%d of %d truncated archives restored", restored, len(cuts))
	}
}

// TestPackWritesEachSubtreeTogether checks the order Unpack relies on to
// give a directory its mode and time when it leaves it: once an entry
// outside a directory follows it, no entry below it comes later. The
// directories are wider than one getdents buffer, with directories among
// their files, so that a walk that read them in pieces and went down
// between pieces is caught.
func TestPackWritesEachSubtreeTogether(t *testing.T) {
	src := t.TempDir()
	for i := range 3 {
		for j := range 150 {
			p := filepath.Join(src, fmt.Sprintf("top%d", i), fmt.Sprintf("name-long-enough-to-fill-buffers-%03d", j))
			if j%10 == 0 {
				write(t, filepath.Join(p, "inner", "f"), "x", 0o644)
			} else {
				write(t, p, "x", 0o644)
			}
		}
	}
	tr := tar.NewReader(bytes.NewReader(pack(t, src, 1<<30)))
	closed := map[string]bool{} // directories left
	var open []string           // the directories of the last entry, outermost first
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n++
		name := strings.TrimSuffix(hdr.Name, "/")
		for len(open) > 0 && !strings.HasPrefix(name, open[len(open)-1]+"/") {
			closed[open[len(open)-1]] = true
			open = open[:len(open)-1]
		}
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if closed[d] {
				t.Fatalf("%s comes after its directory %s was left", name, d)
			}
		}
		if hdr.Typeflag == tar.TypeDir {
			open = append(open, name)
		}
	}
	if want := 3 + 3*150 + 3*15*2; n != want {
		t.Errorf("%d entries, want %d", n, want)
	}
}
