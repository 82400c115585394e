package workspace

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/internal/memtest"
)

// links makes n hard links, with names of about 200 bytes, to one empty
// file in dir: what a job makes with no inode and little disk.
func links(t testing.TB, dir string, n int) {
	t.Helper()
	base := filepath.Join(dir, "base")
	if err := os.WriteFile(base, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 200)
	for i := range n {
		if err := os.Link(base, filepath.Join(dir, fmt.Sprintf("%s%06d", pad, i))); err != nil {
			t.Fatal(err)
		}
	}
}

// A job can make a million names in its directory with little disk (hard
// links of one empty file); the manifest, the snapshot and the clear
// before a restore, run by the worker after or before each job of the
// session, read it a few entries at a time instead of whole.
func TestWalksHoldBoundedMemory(t *testing.T) {
	dir := t.TempDir()
	const n = 60000 // about 12 MB of names alone
	links(t, dir, n)
	const most = 4 << 20
	if peak := memtest.PeakHeap(func() {
		if _, err := Manifest(dir, 1<<30); err != nil {
			t.Error(err)
		}
	}); peak > most {
		t.Errorf("the manifest held %d bytes, more than %d", peak, most)
	}
	var size countWriter
	if peak := memtest.PeakHeap(func() {
		if err := Pack(dir, &size, 1<<30); err != nil {
			t.Error(err)
		}
	}); peak > most {
		t.Errorf("the snapshot held %d bytes, more than %d", peak, most)
	}
	if peak := memtest.PeakHeap(func() {
		if err := Clear(dir); err != nil {
			t.Error(err)
		}
	}); peak > most {
		t.Errorf("the clear held %d bytes, more than %d", peak, most)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the clear left %d entries", len(entries))
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// A workspace of more entries than its disk limit allows files is not
// saved: the manifest and the snapshot stop at MaxEntries and say so.
func TestWalksStopAtMaxEntries(t *testing.T) {
	dir := t.TempDir()
	const maxBytes = 64 << 10
	links(t, dir, int(MaxEntries(maxBytes))) // one over, with base
	if _, err := Manifest(dir, maxBytes); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "entries") {
		t.Errorf("Manifest: %v, want ErrTooLarge for its entries", err)
	}
	if err := Pack(dir, io.Discard, maxBytes); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Pack: %v, want ErrTooLarge", err)
	}
	if err := os.Remove(filepath.Join(dir, "base")); err != nil {
		t.Fatal(err)
	}
	if _, err := Manifest(dir, maxBytes); err != nil {
		t.Errorf("Manifest of MaxEntries entries: %v", err)
	}
}

// A file with many names is archived once, its other names as links to
// it, and restored as one file with as many names: a thousand names of a
// file are not a thousand copies, in the archive or on the next worker's
// disk.
func TestHardLinksArePackedOnce(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	body := strings.Repeat("y", 3000)
	write(t, filepath.Join(src, "sub", "a"), body, 0o640)
	for i := range 1000 {
		if err := os.Link(filepath.Join(src, "sub", "a"), filepath.Join(src, fmt.Sprintf("l%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	const maxBytes = 64 << 10 // 3 MB as copies
	var buf bytes.Buffer
	if err := Pack(src, &buf, maxBytes); err != nil {
		t.Fatalf("Pack: %v", err)
	}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	regular := 0
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		if hdr.Typeflag == tar.TypeReg {
			regular++
		}
	}
	if regular != 1 {
		t.Errorf("%d regular files in the archive, want 1", regular)
	}
	uid, gid := ids()
	if err := Unpack(bytes.NewReader(buf.Bytes()), dst, uid, gid, maxBytes); err != nil {
		t.Fatalf("Unpack: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "l0999"), &st); err != nil || st.Nlink != 1001 {
		t.Errorf("restored file: %d names (%v), want 1001", st.Nlink, err)
	}
	if got := read(t, filepath.Join(dst, "l0500")); got != body {
		t.Errorf("restored link holds %d bytes, want %d", len(got), len(body))
	}
}

// tree makes, below dir, a chain of depth directories named d (or, flat,
// depth directories side by side) and in the deepest (or in dir) files
// regular files and links names of one of them: what a job makes in under
// a second through a descriptor of each directory, whatever the depth.
func tree(t testing.TB, dir string, depth, files, links int, flat bool) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range depth {
		name := "d"
		if flat {
			name = fmt.Sprintf("d%d", i)
		}
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		if flat {
			continue
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	defer unix.Close(fd)
	for i := range files {
		f, err := unix.Openat(fd, fmt.Sprintf("f%d", i), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
	for i := range links {
		if err := unix.Linkat(fd, "f0", fd, fmt.Sprintf("l%d", i), 0); err != nil {
			t.Fatal(err)
		}
	}
}

// A restore costs a few system calls an entry, however deep the entry: a
// job made 500 files and 500 more names of one of them 1,500 directories
// deep (paths of 3 KiB, within MaxPath), and the restore of its snapshot
// on another worker opened every directory of each entry's path from the
// top, two or three times an entry: millions of opens, as root and outside
// every job's limits, for a snapshot of 10 MB (15.9 s on the development
// machine, against 0.3 s for as many entries side by side). The test
// counts the directories a restore opens, not its time.
func TestUnpackCostDoesNotGrowWithDepth(t *testing.T) {
	const depth, files, links = 1500, 500, 500
	var mu sync.Mutex
	opened := map[string]int{}
	hook := func(dir string, n int) { mu.Lock(); opened[dir] = n; mu.Unlock() }
	unpackOpened.Store(&hook)
	defer unpackOpened.Store(nil)
	restore := func(flat bool) int {
		src, dst := t.TempDir(), t.TempDir()
		tree(t, src, depth, files, links, flat)
		var buf bytes.Buffer
		if err := Pack(src, &buf, 1<<30); err != nil {
			t.Fatal(err)
		}
		uid, gid := ids()
		if err := Unpack(bytes.NewReader(buf.Bytes()), dst, uid, gid, 1<<30); err != nil {
			t.Fatal(err)
		}
		last := filepath.Join(dst, "l499")
		if !flat {
			last = filepath.Join(dst, strings.Repeat("d/", depth)+"l499")
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(last, &st); err != nil || st.Nlink != links+1 {
			t.Errorf("restored %s: %d names (%v), want %d", last, st.Nlink, err, links+1)
		}
		mu.Lock()
		defer mu.Unlock()
		return opened[dst]
	}
	flat := restore(true)
	deep := restore(false)
	t.Logf("directories opened: %d side by side, %d %d deep", flat, deep, depth)
	if bound := 2*flat + 2*depth; deep > bound {
		t.Errorf("the restore %d directories deep opened %d directories, past %d (%d for as many entries side by side)", depth, deep, bound, flat)
	}
}

// A restore holds what one path takes, not what all the directories'
// paths take: it held every directory's path until its end, to give each
// its permissions then, 10.7 MB for 4,000 directories at the end of a
// chain 1,000 deep, and a GiB of the worker's memory for the 250,000 of
// paths of 4 KiB that a job may make under the default disk limit (a
// block each, within the file system's inodes).
func TestUnpackHoldsNoPathOfEveryDirectory(t *testing.T) {
	const depth, dirs = 1000, 4000 // 8 MB of paths
	src, dst := t.TempDir(), t.TempDir()
	tree(t, src, depth, 0, 0, false)
	bottom := filepath.Join(src, strings.Repeat("d/", depth))
	for i := range dirs {
		if err := os.Mkdir(filepath.Join(bottom, fmt.Sprintf("x%04d", i)), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := Pack(src, &buf, 1<<30); err != nil {
		t.Fatal(err)
	}
	uid, gid := ids()
	const most = 4 << 20
	if peak := memtest.PeakHeap(func() {
		if err := Unpack(bytes.NewReader(buf.Bytes()), dst, uid, gid, 1<<30); err != nil {
			t.Error(err)
		}
	}); peak > most {
		t.Errorf("the restore held %d bytes, more than %d", peak, most)
	}
	fi, err := os.Stat(filepath.Join(dst, strings.Repeat("d/", depth)+"x3999"))
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("deepest directory: %v, %v; want mode 0750", fi, err)
	}
}
