package worker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
	"golang.org/x/sys/unix"
)

// Reads and writes of a working directory's files resolve below it and
// follow no link: a link (to a file or a directory) and a file with a
// second hard link elsewhere are as missing, and nothing outside changes.
func TestFilesStayBeneath(t *testing.T) {
	t.Parallel()
	cwd, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(secret, filepath.Join(cwd, "link")))
	must(os.Symlink(outside, filepath.Join(cwd, "dirlink")))
	hardTarget := filepath.Join(outside, "hard")
	must(os.WriteFile(hardTarget, []byte("secret"), 0o644))
	must(os.Link(hardTarget, filepath.Join(cwd, "hard")))
	must(unix.Mkfifo(filepath.Join(cwd, "fifo"), 0o600))
	w := &Worker{}
	uid := os.Getuid()
	for _, name := range []string{"link", "dirlink/secret", "dirlink/new", "hard", "fifo"} {
		if _, err := readBeneath(cwd, name, 0, 0); !errors.Is(err, errNoFile) {
			t.Errorf("read %s: %v, want errNoFile", name, err)
		}
		if _, err := w.writeUpload(cwd, name, "eA==", uid, 0, nil); !errors.Is(err, errNoFile) {
			t.Errorf("write %s: %v, want errNoFile", name, err)
		}
	}
	for _, f := range []string{secret, hardTarget} {
		if got, _ := os.ReadFile(f); string(got) != "secret" {
			t.Fatalf("the file outside changed: %q", got)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Fatal("a file was made through a link")
	}

	since := time.Now()
	if d, err := w.writeUpload(cwd, "a/b/c.bin", "AAECAw==", uid, 0, nil); err != nil || d.Size != 4 {
		t.Fatalf("write a/b/c.bin: %+v %v", d, err)
	}
	d, err := readBeneath(cwd, "a/b/c.bin", 1, 2)
	if err != nil || !bytes.Equal(d.Data, []byte{1, 2}) || d.Size != 4 || d.Offset != 1 {
		t.Fatalf("read a piece: %+v %v", d, err)
	}
	if d, err := readBeneath(cwd, "a/b/c.bin", 9, 0); err != nil || len(d.Data) != 0 || d.Size != 4 {
		t.Fatalf("read past the end: %+v %v", d, err)
	}
	if got := changedFiles(cwd, since); len(got) != 1 || got[0] != "a/b/c.bin" {
		t.Fatalf("changed files %q, want the one written since", got)
	}
}

// An upload past the measured disk limit is refused before it is written.
func TestUploadWithinDiskLimit(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	if _, err := (&Worker{}).writeUpload(cwd, "big", "eHh4eHh4eHh4eA==", os.Getuid(), 8, nil); !errors.Is(err, errDiskFull) {
		t.Fatalf("write past the limit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cwd, "big")); err == nil {
		t.Fatal("written anyway")
	}
}

// A batch job's output folder is listed below its working directory, as
// the worker (root) sees it: a job that replaced the folder's parent by a
// link to a host directory has the host's files listed in its result, and
// a job that links the folder itself lists nothing, not the host's.
func TestBatchOutputDirFollowsNoLink(t *testing.T) {
	t.Parallel()
	cwd, host := t.TempDir(), t.TempDir()
	since := time.Now().Add(-time.Second)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(host, "3", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(host, "3", "sub", "host-secret-name"), []byte("x"), 0o644))
	must(os.MkdirAll(filepath.Join(host, "4"), 0o755))
	must(os.WriteFile(filepath.Join(host, "4", "host-secret-name"), []byte("x"), 0o644))
	// out/3: out is a link to the host's directory.
	must(os.Symlink(host, filepath.Join(cwd, "out")))
	if got, _ := outputDirFiles(cwd, &wire.Job{OutputDir: "out/3"}, since); len(got) != 0 {
		t.Errorf("out a link to a host directory: listed %q, want nothing", got)
	}
	// deep/4: the last name itself a link.
	must(os.Mkdir(filepath.Join(cwd, "deep"), 0o755))
	must(os.Symlink(filepath.Join(host, "4"), filepath.Join(cwd, "deep", "4")))
	if got, _ := outputDirFiles(cwd, &wire.Job{OutputDir: "deep/4"}, since); len(got) != 0 {
		t.Errorf("deep/4 a link to a host directory: listed %q, want nothing", got)
	}
	// The job's own output folder is listed, links inside it not followed.
	must(os.MkdirAll(filepath.Join(cwd, "own", "5", "d"), 0o755))
	must(os.WriteFile(filepath.Join(cwd, "own", "5", "d", "result.txt"), []byte("x"), 0o644))
	must(os.Symlink(host, filepath.Join(cwd, "own", "5", "hostlink")))
	if got, _ := outputDirFiles(cwd, &wire.Job{OutputDir: "own/5"}, since); len(got) != 1 || got[0] != "own/5/d/result.txt" {
		t.Errorf("the job's own output folder: listed %q, want own/5/d/result.txt", got)
	}
}

// A job can fill a directory of its working directory with millions of
// names (hard links of one empty file take neither inodes nor data), and
// the worker lists the working directory after each of the session's
// calls, and the display directory after each job. Reading a directory
// whole held every name in the worker's memory: 1,000,000 links took 600
// MiB per call, and four calls at once 2.4 GB. The walks read a bounded
// part of any directory.
func TestJobDirectoriesAreReadInBoundedPieces(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	const links = 60000
	pad := strings.Repeat("x", 200)
	fill := func(dir string) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(dir, "base")
		if err := os.WriteFile(base, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for i := range links {
			if err := os.Link(base, filepath.Join(dir, fmt.Sprintf("%s%06d", pad, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	since := time.Now().Add(-time.Minute)
	fill(filepath.Join(cwd, "d"))
	jobID := "01M90R39DBYZWDMAAF4FWT2G58"
	fill(filepath.Join(cwd, DisplayDir, jobID))
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	const most = 8 << 20 // the whole directory is about 60,000 × 200 bytes of names alone
	var files []string
	if n := allocated(func() { files = changedFiles(cwd, since) }); n > most {
		t.Errorf("listing the changed files allocated %d bytes, more than %d", n, most)
	}
	if len(files) != wire.MaxChangedFiles {
		t.Errorf("changed files: %d, want %d", len(files), wire.MaxChangedFiles)
	}
	var notes []string
	if n := allocated(func() { _, notes, _ = collectPictures(cwd, jobID) }); n > most {
		t.Errorf("collecting the pictures allocated %d bytes, more than %d", n, most)
	}
	if len(notes) != 0 {
		t.Errorf("pictures: notes %q for a directory without pictures", notes)
	}
}

// chain makes a chain of depth directories named d below dir, each made
// in a descriptor of the one before, as a job makes it in a second
// whatever the depth, and returns the deepest's path.
func chain(t testing.TB, dir string, depth int) string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range depth {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	return filepath.Join(dir, strings.Repeat("d/", depth))
}

// A job made two chains of directories 2,000 deep (paths of 4 KiB, within
// PATH_MAX), and the listing of the files changed by each of its session's
// calls opened every directory of the chains from the top: 4 million names
// looked up (0.28 s of the worker's CPU per call of print(1) in a cluster
// of the development machine, as root and outside every job's limits,
// against under 0.01 s for a session without them). The walk bounds the
// names it opens as it bounds its entries; the test counts them.
func TestChangedFilesOfADeepChainCostABoundedWalk(t *testing.T) {
	const depth = 2000
	var mu sync.Mutex
	opened := map[string]int{} // by cwd: only this test's walks
	hook := func(cwd string, n int) { mu.Lock(); opened[cwd] = n; mu.Unlock() }
	changedWalkOpened.Store(&hook)
	defer changedWalkOpened.Store(nil)
	since := time.Now().Add(-time.Minute)
	walk := func(deep bool) int {
		cwd := t.TempDir()
		for _, top := range []string{"a", "b"} {
			dir := filepath.Join(cwd, top)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if deep {
				chain(t, dir, depth)
				continue
			}
			for i := range depth {
				if err := os.Mkdir(filepath.Join(dir, fmt.Sprintf("d%d", i)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := os.WriteFile(filepath.Join(cwd, "out.txt"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		files := changedFiles(cwd, since)
		if len(files) != 1 || files[0] != "out.txt" {
			t.Errorf("changed files: %q, want [out.txt]", files)
		}
		mu.Lock()
		defer mu.Unlock()
		return opened[cwd]
	}
	flat, deep := walk(false), walk(true)
	t.Logf("names opened: %d for 2 × %d directories side by side, %d for two chains as deep", flat, depth, deep)
	if deep > maxWalkOpens+2*depth {
		t.Errorf("listing two chains of %d directories opened %d names, past the walk's bound of %d", depth, deep, maxWalkOpens)
	}
}

// A job's HOME is its working directory, so the caches libraries keep
// there (matplotlib's and fontconfig's on a first plot, a model hub's
// downloads) are files the call changed, and their names, starting with
// a dot, sort before every other. A result links at most
// wire.MaxChangedFiles files, and those it kept were the first in that
// order: a job that wrote its result beside a cache of that many files
// had its result left out, the cache linked. The job's own files come
// first now, the hidden ones after them.
func TestChangedFilesListTheJobsOwnBeforeHiddenOnes(t *testing.T) {
	t.Parallel()
	cwd := t.TempDir()
	since := time.Now().Add(-time.Minute)
	cache := filepath.Join(cwd, ".cache", "hub")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range wire.MaxChangedFiles + 8 {
		if err := os.WriteFile(filepath.Join(cache, fmt.Sprintf("blob%02d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(cwd, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"result.csv", "out/plot.png", ".env"} {
		if err := os.WriteFile(filepath.Join(cwd, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := changedFiles(cwd, since)
	if len(files) != wire.MaxChangedFiles {
		t.Fatalf("%d changed files listed, want the most, %d: %q", len(files), wire.MaxChangedFiles, files)
	}
	if files[0] != "out/plot.png" || files[1] != "result.csv" {
		t.Errorf("changed files begin %q, want the job's own files first: out/plot.png, result.csv", files[:3])
	}
	if files[2] != ".cache/hub/blob00" {
		t.Errorf("after the job's own files comes %q, want the hidden ones, sorted: .cache/hub/blob00", files[2])
	}
}
