package batch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// The files a job wrote to its output folder (out/ROW of the batch's
// working directory, $CODEXEC_OUTPUT_DIR to the script) are copied to
// jobs/NAME/files/ before the row's line is written: the job's result
// lists them, and each is read through resources/read of its workspace
// URI with ?batch=ID, in pieces. What is collected is bounded per job
// (the result lists at most 32 files; maxJobFileBytes in all); what is
// left out is named in status.json's notes. Names come from the cluster:
// one that is not a plain relative path below the output folder is left
// out, and the files are written through an os.Root of jobs/NAME/files,
// which nothing the job names can leave. A file already there (the
// client killed after copying it, the batch resumed) is not read again:
// each is written under a temporary name and renamed once whole.

// maxJobFileBytes bounds the bytes of the files collected from one job.
const maxJobFileBytes = 256 << 20

// pieceBytes is the most one read asks for (the frontend's bound too).
const pieceBytes = 4 << 20

// partialSuffix marks a file still being copied.
const partialSuffix = ".codexec-partial"

// fileReader reads a piece of a file of batch id's working directory and
// says how large the file is.
type fileReader func(ctx context.Context, id, rel string, offset, length int64) ([]byte, int64, error)

// collectFiles copies the files of res below row r's output folder into
// dir/files; it returns the collected names (relative to dir/files) and
// notes on what was left out.
func collectFiles(ctx context.Context, read fileReader, id, dir string, r row, res jobResult) (got, notes []string) {
	return collectFilesWithin(ctx, read, id, dir, r, res, maxJobFileBytes)
}

// collectFilesWithin is collectFiles with budget bytes in all.
func collectFilesWithin(ctx context.Context, read fileReader, id, dir string, r row, res jobResult, budget int64) (got, notes []string) {
	notes = append(notes, res.Notes...)
	if len(res.Files) == 0 {
		return nil, notes
	}
	filesDir := filepath.Join(dir, "files")
	if err := os.MkdirAll(filesDir, 0o755); err != nil {
		return nil, append(notes, fmt.Sprintf("no file collected: %v", err))
	}
	root, err := os.OpenRoot(filesDir)
	if err != nil {
		return nil, append(notes, fmt.Sprintf("no file collected: %v", err))
	}
	defer root.Close()
	prefix := "out/" + strconv.FormatInt(r.N, 10) + "/"
	for _, rel := range res.Files {
		local, ok := localName(rel, prefix)
		if !ok {
			notes = append(notes, fmt.Sprintf("%q left out: not a plain name below %s", rel, prefix))
			continue
		}
		n, err := collectFile(ctx, read, root, id, rel, local, budget)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s left out: %v", local, err))
			continue
		}
		budget -= n
		got = append(got, local)
	}
	return got, notes
}

// localName is rel without prefix, when it is a plain relative path below
// it: slash-separated names, none empty, "." or "..", no backslash or NUL.
func localName(rel, prefix string) (string, bool) {
	local, ok := strings.CutPrefix(rel, prefix)
	if !ok || local == "" || strings.ContainsAny(local, "\\\x00") || path.IsAbs(local) {
		return "", false
	}
	for _, name := range strings.Split(local, "/") {
		if name == "" || name == "." || name == ".." {
			return "", false
		}
	}
	return local, filepath.IsLocal(filepath.FromSlash(local))
}

// errOverBudget says a file would pass the per-job bound.
var errOverBudget = fmt.Errorf("the files of one job are collected up to %d MiB", maxJobFileBytes>>20)

// collectFile copies rel to local below root, unless it is there; it
// returns the file's size.
func collectFile(ctx context.Context, read fileReader, root *os.Root, id, rel, local string, budget int64) (int64, error) {
	if fi, err := root.Lstat(filepath.FromSlash(local)); err == nil {
		if !fi.Mode().IsRegular() {
			return 0, errors.New("something else is in its place")
		}
		return fi.Size(), nil // collected before
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	data, size, err := read(ctx, id, rel, 0, pieceBytes)
	if err != nil {
		return 0, err
	}
	if size > budget {
		return 0, fmt.Errorf("%d bytes: %w", size, errOverBudget)
	}
	if d := path.Dir(local); d != "." {
		if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return 0, err
		}
	}
	tmp := filepath.FromSlash(local) + partialSuffix
	_ = root.Remove(tmp)
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, err
	}
	n, err := copyPieces(ctx, read, f, id, rel, data, size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, filepath.FromSlash(local))
	}
	if err != nil {
		_ = root.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// copyPieces writes first, then the rest of rel's size bytes, to f.
func copyPieces(ctx context.Context, read fileReader, f *os.File, id, rel string, first []byte, size int64) (int64, error) {
	var n int64
	for data := first; ; {
		if _, err := f.Write(data); err != nil {
			return n, err
		}
		n += int64(len(data))
		if n >= size {
			return n, nil
		}
		if len(data) == 0 {
			return n, fmt.Errorf("the file shrank to %d bytes while read", n)
		}
		var err error
		if data, _, err = read(ctx, id, rel, n, min(pieceBytes, size-n)); err != nil {
			return n, err
		}
	}
}
