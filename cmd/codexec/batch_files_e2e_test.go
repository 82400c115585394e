package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// batchFilesScript writes, in its output folder, a text file and a binary
// file (in a subfolder, larger than one read of 4 MiB) that depend on its
// row, and a file outside the folder that is not collected.
const batchFilesScript = `import json, os
x = json.loads(os.environ['CODEXEC_PARAMS'])['x']
out = os.environ['CODEXEC_OUTPUT_DIR']
assert not os.path.isabs(out) and os.path.isdir(out), out
with open(os.path.join(out, 'result.txt'), 'w') as f:
    f.write('x=%d squared=%d\n' % (x, x * x))
os.makedirs(os.path.join(out, 'sub'))
with open(os.path.join(out, 'sub', 'data.bin'), 'wb') as f:
    f.write(bytes((i * 7 + x) % 256 for i in range(256)) * 20481 + b'\0end')
with open('outside.txt', 'w') as f:
    f.write('not in the output folder')
print(out)
`

// batchFilesBinary is what batchFilesScript writes to sub/data.bin for x.
func batchFilesBinary(x int) []byte {
	b := make([]byte, 256)
	for i := range b {
		b[i] = byte((i*7 + x) % 256)
	}
	return append(bytes.Repeat(b, 20481), "\x00end"...)
}

// Each job of a batch writes into its own output folder (out/ROW, named
// by $CODEXEC_OUTPUT_DIR), and the client copies those files, byte for
// byte, to jobs/NAME/files/; status.json lists them. Run again, the batch
// fetches nothing.
func TestBatchOutputFilesEmbedded(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	env := batchEnv(t, filepath.Join(tmp, "data"))
	writeFiles(t, tmp, map[string]string{"job.py": batchFilesScript, "rows.jsonl": "{\"x\": 3}\n{\"x\": 5}\n"})
	out := filepath.Join(tmp, "results")
	args := []string{"--script", filepath.Join(tmp, "job.py"), "--params", filepath.Join(tmp, "rows.jsonl"), "--out", out}
	if text, rc := runBatchCmd(t, env, args...); rc != 0 {
		t.Fatalf("exit %d:\n%s", rc, text)
	}
	checkBatchFiles(t, out, []int{3, 5})
	if text, rc := runBatchCmd(t, env, args...); rc != 0 {
		t.Fatalf("run again: exit %d:\n%s", rc, text)
	}
	checkBatchFiles(t, out, []int{3, 5})
}

// checkBatchFiles checks the files of the batch in out whose rows had xs.
func checkBatchFiles(t *testing.T, out string, xs []int) {
	t.Helper()
	for row, x := range xs {
		job := filepath.Join(out, "jobs", fmt.Sprintf("%06d", row))
		if got, want := readFile(t, filepath.Join(job, "stdout")), fmt.Sprintf("out/%d\n", row); got != want {
			t.Errorf("row %d: $CODEXEC_OUTPUT_DIR was %q, want %q", row, got, want)
		}
		if got, want := readFile(t, filepath.Join(job, "files", "result.txt")), fmt.Sprintf("x=%d squared=%d\n", x, x*x); got != want {
			t.Errorf("row %d: result.txt %q, want %q", row, got, want)
		}
		if got := readFile(t, filepath.Join(job, "files", "sub", "data.bin")); got != string(batchFilesBinary(x)) {
			t.Errorf("row %d: data.bin differs from what the job wrote (%d bytes, want %d)", row, len(got), len(batchFilesBinary(x)))
		}
		var all []string
		_ = filepath.WalkDir(filepath.Join(job, "files"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(filepath.Join(job, "files"), p)
				all = append(all, filepath.ToSlash(rel))
			}
			return nil
		})
		if want := []string{"result.txt", "sub/data.bin"}; !slices.Equal(all, want) {
			t.Errorf("row %d: files/ holds %q, want %q", row, all, want)
		}
		var status struct {
			Files []string `json:"files"`
			Notes []string `json:"notes"`
		}
		if err := json.Unmarshal([]byte(readFile(t, filepath.Join(job, "status.json"))), &status); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(status.Files, []string{"result.txt", "sub/data.bin"}) || len(status.Notes) != 0 {
			t.Errorf("row %d: status.json files %q, notes %q", row, status.Files, status.Notes)
		}
	}
}
