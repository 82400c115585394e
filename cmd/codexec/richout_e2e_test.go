package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// A 5 MiB output with the error at the end, through an MCP client: the
// result keeps the first bytes and the last (the traceback), says how much
// it dropped and where the whole of each stream is, and the next call reads
// that file in pieces, byte for byte.
func TestDevOutputPastTheCap(t *testing.T) {
	t.Parallel()
	c, _ := devStdio(t, t.TempDir())
	code := `
import sys
for i in range(5 * 1024):
    print(f"row {i:06d} " + "x" * 1012)
for i in range(5 * 1024):
    print(f"warning {i:06d} " + "w" * 1008, file=sys.stderr)
print("the answer is 42")
raise ValueError("the error at the end")
`
	res, er := call(t, c, "execute_code", map[string]any{"code": code})
	if !res.IsError || er.Status != "error" {
		t.Fatalf("isError=%v status %s (%s)", res.IsError, er.Status, er.Message)
	}
	if !strings.HasPrefix(er.Stdout, "row 000000 ") || !strings.HasSuffix(er.Stdout, "the answer is 42\n") ||
		!strings.HasSuffix(er.Stderr, "ValueError: the error at the end\n") {
		t.Fatalf("the first and last bytes are not both kept: stdout ends %q, stderr ends %q", tail(er.Stdout, 200), tail(er.Stderr, 200))
	}
	if !er.StdoutTruncated || er.StdoutFile == "" || er.StderrFile == "" {
		t.Fatalf("truncated %v, files %q %q", er.StdoutTruncated, er.StdoutFile, er.StderrFile)
	}
	note := fmt.Sprintf("bytes of stdout dropped here; all %d bytes are in the file %s", er.StdoutBytes, er.StdoutFile)
	if !strings.Contains(text(res), note) || !strings.Contains(text(res), "ValueError: the error at the end") {
		t.Fatalf("the text does not say what was dropped (%q) or lost the error", note)
	}
	var want strings.Builder
	for i := range 5 * 1024 {
		fmt.Fprintf(&want, "row %06d %s\n", i, strings.Repeat("x", 1012))
	}
	want.WriteString("the answer is 42\n")
	if er.StdoutBytes != int64(want.Len()) {
		t.Fatalf("stdout counted %d bytes, want %d", er.StdoutBytes, want.Len())
	}
	sum := sha256.Sum256([]byte(want.String()))
	read := fmt.Sprintf(`
import hashlib
h = hashlib.sha256()
with open(%q, "rb") as f:
    while piece := f.read(1 << 20):
        h.update(piece)
print(h.hexdigest())
`, er.StdoutFile)
	if _, got := call(t, c, "execute_code", map[string]any{"code": read}); got.Stdout != hex.EncodeToString(sum[:])+"\n" {
		t.Fatalf("the stdout file read back: %s %q %q", got.Status, got.Stdout, tail(got.Stderr, 200))
	}
}
