package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A session's next job gets the file of its last job's script, emptied and
// written again; another session's job never gets it; what is not a
// regular file of one link is removed, not reused, and what it links to is
// left alone.
func TestScriptFilesReusedWithinTheirSession(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	var s scriptFiles
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	j1 := filepath.Join(a, "J1_main.py")
	if err := s.write(a, j1, "print('a secret of a')\n"); err != nil {
		t.Fatal(err)
	}
	ino := inode(t, j1)
	s.release(j1, "J1", log)
	free := filepath.Join(a, ".free-J1")
	if _, err := os.Lstat(j1); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the script is still there once its job is over: %v", err)
	}
	if got := read(free); got != "" {
		t.Fatalf("a free script holds %q: its job's code was kept", got)
	}

	// Another session: a file of its own.
	j2 := filepath.Join(b, "J2_main.py")
	if err := s.write(b, j2, "print(2)\n"); err != nil {
		t.Fatal(err)
	}
	if inode(t, j2) == ino {
		t.Fatal("another session's job got the first session's script file")
	}

	// The same session: the same file, with the new job's code only.
	j3 := filepath.Join(a, "J3_main.py")
	if err := s.write(a, j3, "print(3)\n"); err != nil {
		t.Fatal(err)
	}
	if inode(t, j3) != ino || read(j3) != "print(3)\n" {
		t.Fatalf("the session's next script: inode %d (want %d), %q", inode(t, j3), ino, read(j3))
	}
	if _, err := os.Lstat(free); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the reused free file is still there: %v", err)
	}

	// A script already there (a redelivered job's) is not replaced, and
	// the free file stays free.
	s.release(j3, "J3", log)
	again := filepath.Join(a, "J4_main.py")
	if err := os.WriteFile(again, []byte("print(4)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.write(a, again, "print('other')\n"); !errors.Is(err, fs.ErrExist) || read(again) != "print(4)\n" {
		t.Fatalf("write over an existing script: %v, %q", err, read(again))
	}
	if s.count(a) != 1 {
		t.Fatalf("%d free files known, want 1", s.count(a))
	}

	// A script replaced by a second link to a file elsewhere, or by a
	// symbolic link: removed, and the file it names keeps its content.
	outside := filepath.Join(root, "outside")
	if err := os.WriteFile(outside, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	hard, soft := filepath.Join(a, "J5_main.py"), filepath.Join(a, "J6_main.py")
	if err := os.Link(outside, hard); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, soft); err != nil {
		t.Fatal(err)
	}
	s.release(hard, "J5", log)
	s.release(soft, "J6", log)
	for _, p := range []string{hard, soft, filepath.Join(a, ".free-J5"), filepath.Join(a, ".free-J6")} {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want it gone", p, err)
		}
	}
	if read(outside) != "keep me" {
		t.Fatal("a file linked from a script was emptied")
	}

	// A directory keeps at most maxFreeScripts free files.
	for i := range maxFreeScripts + 2 {
		p := filepath.Join(b, "K"+strings.Repeat("x", i)+"_main.py")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.release(p, "K"+strings.Repeat("x", i), log)
	}
	entries, _ := os.ReadDir(b)
	if s.count(b) != maxFreeScripts || len(entries) != maxFreeScripts+1 { // and J2_main.py
		t.Fatalf("%d free files known, %d entries: want %d free", s.count(b), len(entries), maxFreeScripts)
	}

	// Once the session's files are removed, its free files are forgotten,
	// and a free file found gone is skipped.
	s.forget(b)
	if s.count(b) != 0 {
		t.Fatal("forget kept the directory's free files")
	}
	if err := os.Remove(filepath.Join(a, ".free-J3")); err != nil {
		t.Fatal(err)
	}
	j7 := filepath.Join(a, "J7_main.py")
	if err := s.write(a, j7, "print(7)\n"); err != nil || read(j7) != "print(7)\n" {
		t.Fatalf("write with its free file gone: %v", err)
	}
}

// What a job's script costs the worker: a new file per job against the
// session's last one reused (scriptFiles), in the worker's data directory,
// one job at a time and eight at once (b.SetParallelism with GOMAXPROCS 1).
func BenchmarkScriptFile(b *testing.B) {
	log := slog.New(slog.DiscardHandler)
	for _, par := range []int{1, 8} {
		for _, reuse := range []bool{false, true} {
			name := fmt.Sprintf("new/jobs=%d", par)
			if reuse {
				name = fmt.Sprintf("reused/jobs=%d", par)
			}
			b.Run(name, func(b *testing.B) {
				dir := b.TempDir()
				var s scriptFiles
				var n atomic.Int64
				b.SetParallelism(par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						id := fmt.Sprintf("J%012d", n.Add(1))
						p := filepath.Join(dir, id+"_main.py")
						if reuse {
							if err := s.write(dir, p, "print(1)\n"); err != nil {
								b.Error(err)
								return
							}
							s.release(p, id, log)
						} else {
							if err := writeNew(p, "print(1)\n"); err != nil {
								b.Error(err)
								return
							}
							removeScript(p, log)
						}
					}
				})
			})
		}
	}
}

// What a worker killed while it ran a session's jobs left in the session's
// scripts directory is tidied by its next run at the session's first job:
// the scripts, each holding its job's code, are removed, and the free files
// reused. They used to stay until the session was collected. A context's
// script is left alone.
func TestScriptFilesOfAnEarlierRunAreTidied(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	var before scriptFiles
	for _, id := range []string{"K1", "K2"} {
		if err := before.write(dir, filepath.Join(dir, id+"_main.py"), "print('code of "+id+"')\n"); err != nil {
			t.Fatal(err)
		}
	}
	before.release(filepath.Join(dir, "K1_main.py"), "K1", log) // K1 ended; K2 ran when the worker was killed
	ctxScript := filepath.Join(dir, "context_C1.py")
	if err := os.WriteFile(ctxScript, []byte("# a context\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var after scriptFiles // the worker's next run
	next := filepath.Join(dir, "K3_main.py")
	if err := after.write(dir, next, "print(3)\n"); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "K3_main.py context_C1.py"; got != want {
		t.Fatalf("the scripts directory after the next run's first job: %s, want %s (the killed job's script gone, the free file reused)", got, want)
	}
}
