package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// fiveMiB is the code of a job that prints 5 MiB to stdout and as much to
// stderr, then dies of an error: its last lines, the ones that say what
// went wrong, are past any output cap.
const fiveMiB = `
import sys
for i in range(5 * 1024):
    print(f"row {i:06d} " + "x" * 1012)
for i in range(5 * 1024):
    print(f"warning {i:06d} " + "w" * 1008, file=sys.stderr)
print("the answer is 42")
raise ValueError("the error at the end")
`

// fiveMiBStdout is what fiveMiB writes to stdout.
func fiveMiBStdout() []byte {
	var b strings.Builder
	for i := range 5 * 1024 {
		fmt.Fprintf(&b, "row %06d %s\n", i, strings.Repeat("x", 1012))
	}
	b.WriteString("the answer is 42\n")
	return []byte(b.String())
}

// A job whose output passes its cap: the result keeps the first and the
// last bytes of each stream (the traceback at the end of stderr, the last
// line of stdout), says how much it dropped, and names a file of the
// working directory that holds the whole stream, byte for byte, which the
// session's next job reads in pieces.
func TestOutputPastTheCapKeptWhole(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startDiskWorker(t, fx, ExecZygote)
	const scope = "output-scope"
	res := runDiskJob(t, fx, scope, fiveMiB, 0)
	if res.Status != "error" {
		t.Fatalf("status %s (%s), want error", res.Status, res.Message)
	}
	for _, c := range []struct{ stream, kept, file, first, last string }{
		{"stdout", res.Stdout, res.StdoutFile, "row 000000 x", "the answer is 42\n"},
		{"stderr", res.Stderr, res.StderrFile, "warning 000000 w", "ValueError: the error at the end\n"},
	} {
		if !strings.HasPrefix(c.kept, c.first) || !strings.HasSuffix(c.kept, c.last) {
			t.Errorf("%s: kept %q ... %q; want the stream's first and last bytes", c.stream, clip(c.kept, 40), clipEnd(c.kept))
		}
		if want := OutputDir + "/" + res.JobID + "." + c.stream; c.file != want {
			t.Errorf("%s file %q, want %q", c.stream, c.file, want)
		}
		if !strings.Contains(c.kept, "bytes of "+c.stream+" dropped here; all ") || !strings.Contains(c.kept, c.file) {
			t.Errorf("%s: no line says what was dropped and where the whole output is", c.stream)
		}
		if len(c.kept) > 1<<20 || len(c.kept) < 1<<20-noteRoom {
			t.Errorf("%s: kept %d bytes with the note; want the 1 MiB cap, less at most %d", c.stream, len(c.kept), noteRoom)
		}
	}
	want := fiveMiBStdout()
	if res.StdoutBytes != int64(len(want)) || !res.StdoutTruncated {
		t.Fatalf("stdout: %d bytes, truncated %v; want %d, true", res.StdoutBytes, res.StdoutTruncated, len(want))
	}
	got, err := os.ReadFile(filepath.Join(sessionWork(w, scope), res.StdoutFile))
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("the stdout file holds %d bytes, not the stream's %d byte for byte", len(got), len(want))
	}
	// The next job, as the session's uid, reads it in pieces.
	sum := sha256.Sum256(want)
	read := fmt.Sprintf(`
import hashlib
h = hashlib.sha256()
with open(%q, "rb") as f:
    f.seek(len(b"row 000000 ") + 1012 + 1)
    print(f.read(11).decode())
    f.seek(0)
    while piece := f.read(1 << 20):
        h.update(piece)
print(h.hexdigest())
`, res.StdoutFile)
	next := runDiskJob(t, fx, scope, read, 0)
	if wantOut := "row 000001 \n" + hex.EncodeToString(sum[:]) + "\n"; next.Status != "ok" || next.Stdout != wantOut {
		t.Fatalf("reading the file back: %s %q %q; want %q", next.Status, next.Stdout, clipEnd(next.Stderr), wantOut)
	}
}

func clip(s string, n int) string { return s[:min(n, len(s))] }

// The working directory is the job's: a link it left where the output
// files go makes the worker keep no file, rather than write through it.
func TestOutputFileFollowsNoLink(t *testing.T) {
	fx := newLifecycleFixture(t)
	startDiskWorker(t, fx, ExecZygote)
	outside := t.TempDir()
	if err := os.Chmod(outside, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, link := range []string{".codexec", ".codexec/output"} {
		t.Run(strings.ReplaceAll(link, "/", "_"), func(t *testing.T) {
			scope := "link-" + strings.ReplaceAll(strings.Trim(link, "."), "/", "-")
			code := fmt.Sprintf(`
import os, shutil
os.makedirs(".codexec", exist_ok=True)
if %q == ".codexec":
    os.rmdir(".codexec")
os.symlink(%q, %q)
print("y" * (3 << 20))
`, link, outside, link)
			res := runDiskJob(t, fx, scope, code, 0)
			if res.Status != "ok" || res.StdoutFile != "" || !strings.Contains(res.Stdout, "dropped here; not kept elsewhere") {
				t.Fatalf("status %s (%s), file %q, note %q", res.Status, res.Message, res.StdoutFile, clip(res.Stdout[len(res.Stdout)/2-200:], 400))
			}
			entries, _ := os.ReadDir(outside)
			if len(entries) != 0 {
				t.Fatalf("the worker wrote through the job's link: %v", entries)
			}
		})
	}
}

// A session keeps its last keptOutputFiles output files; older ones go,
// and files of other names in the directory stay.
func TestOutputFilesPruned(t *testing.T) {
	cwd := t.TempDir()
	var names []string
	for range keptOutputFiles + 3 {
		o := newOutputFiles(cwd, ulid.Make().String(), os.Getuid(), 0, slog.New(slog.DiscardHandler))
		f := o.Spill("stdout")
		if f == nil {
			t.Fatal("no output file")
		}
		if _, err := f.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		names = append(names, filepath.Base(o.close()["stdout"]))
		if len(names) == 1 {
			if err := os.WriteFile(filepath.Join(cwd, OutputDir, "mine.txt"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(filepath.Join(cwd, OutputDir))
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := append(names[len(names)-keptOutputFiles:], "mine.txt")
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("left %v, want %v", left, want)
	}
}

// A stream's file stops at its bound, a quarter of the disk limit.
func TestOutputFileBounded(t *testing.T) {
	cwd := t.TempDir()
	o := newOutputFiles(cwd, ulid.Make().String(), os.Getuid(), 400, slog.New(slog.DiscardHandler))
	f := o.Spill("stderr")
	n, err := f.Write(make([]byte, 150))
	if n != 100 || err == nil {
		t.Errorf("Write = %d, %v; want 100 and an error", n, err)
	}
	o.close()
}

// The note is within the room it takes from the first bytes, whatever the
// numbers and the file.
func TestCutOutputNoteFits(t *testing.T) {
	kept := []byte(strings.Repeat("a", 600) + strings.Repeat("z", 400))
	file := OutputDir + "/" + ulid.Make().String() + ".stderr"
	for _, c := range []struct {
		total, spilled int64
		file           string
	}{{1001, 1001, file}, {1 << 62, 1 << 61, file}, {1 << 62, 0, ""}} {
		got := cutOutput("stderr", kept, 600, c.total, c.spilled, c.file)
		if len(got) > len(kept) || !strings.HasPrefix(got, strings.Repeat("a", 600-noteRoom)) || !strings.HasSuffix(got, "]\n"+strings.Repeat("z", 400)) {
			t.Errorf("total %d: %d bytes, %q", c.total, len(got), got[600-noteRoom:])
		}
	}
}
