package batch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// workspace is a fileReader of files held in memory, as the cluster
// answers resources/read: pieces of at most pieceBytes, and the size.
type workspace struct {
	files map[string][]byte
	reads int
}

func (w *workspace) read(_ context.Context, _, rel string, offset, length int64) ([]byte, int64, error) {
	w.reads++
	data, ok := w.files[rel]
	if !ok {
		return nil, 0, errors.New("no such file in the working directory")
	}
	end := min(int64(len(data)), offset+min(length, pieceBytes))
	return data[offset:end], int64(len(data)), nil
}

// Names the cluster gives that are not plain relative names below the
// job's own output folder are left out with a note, and nothing is
// written outside jobs/NAME/files, not even through a link placed there.
func TestCollectFilesStaysInside(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "results", "jobs", "000000")
	outside := filepath.Join(tmp, "outside")
	if err := os.MkdirAll(filepath.Join(dir, "files"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "files", "link")); err != nil {
		t.Fatal(err)
	}
	hostile := []string{
		"out/0/../../../../outside/a", "out/0/..", "out/0/./a", "out/0//a", "out/0/", "/etc/passwd",
		"out/1/other-row", "out/00/a", `out/0/..\..\a`, "out/0/a\x00b", "out/0/link/b", "out/0/link",
	}
	ws := &workspace{files: map[string][]byte{"out/0/ok.txt": []byte("fine"), "out/0/deep/er/x.bin": {0, 1, 2, 255}}}
	for _, h := range hostile {
		ws.files[h] = []byte("escaped")
	}
	res := jobResult{Files: append([]string{"out/0/ok.txt", "out/0/deep/er/x.bin"}, hostile...)}
	got, notes := collectFiles(context.Background(), ws.read, "id", dir, row{N: 0, Name: "000000"}, res)
	if !slices.Equal(got, []string{"ok.txt", "deep/er/x.bin"}) {
		t.Errorf("collected %q, want ok.txt and deep/er/x.bin", got)
	}
	if len(notes) != len(hostile) {
		t.Errorf("%d notes for %d names left out: %q", len(notes), len(hostile), notes)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("written outside the results: %v", entries)
	}
	_ = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Type().IsRegular() && !strings.HasPrefix(p, filepath.Join(dir, "files")+string(filepath.Separator)) {
			t.Errorf("a file outside jobs/NAME/files: %s", p)
		}
		return nil
	})
	if b, err := os.ReadFile(filepath.Join(dir, "files", "deep", "er", "x.bin")); err != nil || string(b) != "\x00\x01\x02\xff" {
		t.Errorf("x.bin: %q, %v", b, err)
	}
}

// A file larger than one read arrives whole, in pieces; collected again
// (the batch resumed), what is there is not read again; over the per-job
// bound a file is left out with a note.
func TestCollectFilesPiecesResumeAndBound(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "jobs", "000007")
	big := make([]byte, pieceBytes*2+5)
	for i := range big {
		big[i] = byte(i * 13)
	}
	ws := &workspace{files: map[string][]byte{"out/7/big.bin": big, "out/7/small.txt": []byte("s\n")}}
	res := jobResult{Files: []string{"out/7/big.bin", "out/7/small.txt"}}
	r := row{N: 7, Name: "000007"}
	got, notes := collectFiles(context.Background(), ws.read, "id", dir, r, res)
	if len(got) != 2 || len(notes) != 0 || ws.reads != 4 {
		t.Fatalf("collected %q, notes %q, %d reads; want both files in 4 reads", got, notes, ws.reads)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "files", "big.bin")); string(b) != string(big) {
		t.Errorf("big.bin differs (%d bytes of %d)", len(b), len(big))
	}
	ws.reads = 0
	if got, _ := collectFiles(context.Background(), ws.read, "id", dir, r, res); len(got) != 2 || ws.reads != 0 {
		t.Errorf("collected again: %q in %d reads, want both in none", got, ws.reads)
	}
	ws.files["out/7/huge.bin"] = make([]byte, 10)
	huge := jobResult{Files: []string{"out/7/huge.bin"}}
	ws.reads = 0
	if got, notes := collectFilesWithin(context.Background(), ws.read, "id", dir, r, huge, 9); len(got) != 0 || len(notes) != 1 || !strings.Contains(notes[0], "huge.bin") {
		t.Errorf("over the bound: collected %q, notes %q", got, notes)
	}
	if _, err := os.Lstat(filepath.Join(dir, "files", "huge.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("huge.bin written over the bound: %v", err)
	}
}
