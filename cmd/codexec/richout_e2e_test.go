package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"image/png"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
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
	// And through resources/read, in pieces.
	if got := readWhole(t, c, "codexec://workspace/"+er.StdoutFile); sha256.Sum256(got) != sum {
		t.Fatalf("the stdout file read through resources/read: %d bytes, not the stream's %d", len(got), want.Len())
	}
}

// pictures returns the image content of a result, decoded.
func pictures(t *testing.T, res *mcp.CallToolResult) [][]byte {
	t.Helper()
	var out [][]byte
	for _, c := range res.Content {
		img, ok := c.(mcp.ImageContent)
		if !ok {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil || img.MIMEType != "image/png" {
			t.Fatalf("image content %s: %v", img.MIMEType, err)
		}
		out = append(out, data)
	}
	return out
}

// A matplotlib plot arrives as an image, through an MCP client, with
// matplotlib and pandas installed from PyPI by real uv: the figure shown
// with plt.show(), then the one left open when the code ends; a pandas
// table displayed comes back as text. The time from plt.show() to the image
// in the client's hands is logged (median of five calls).
func TestDevPlotArrivesAsImage(t *testing.T) {
	t.Parallel()
	requirePyPI(t)
	requireUV(t)
	c := devStdioMinimal(t, t.TempDir(), "CODEXEC_MANAGERS=uv,venv")
	if res, er := envCall(t, c, "install_dependencies", map[string]any{"packages": []any{"matplotlib", "pandas"}}); res.IsError {
		t.Fatalf("install matplotlib and pandas: %s %+v", text(res), er)
	}
	code := `
import time
import matplotlib.pyplot as plt
import pandas as pd
plt.plot([1, 4, 9, 16])
plt.title("shown")
t0 = time.time()
plt.show()
plt.figure()
plt.bar(["a", "b"], [3, 5])
display(pd.DataFrame({"city": ["Oslo", "Lima"], "temp": [4, 19]}))
print(repr(t0))
`
	var delays []float64
	for i := range 5 {
		res, er := call(t, c, "execute_code", map[string]any{"code": code})
		got := time.Now()
		if res.IsError || er.Images != 2 {
			t.Fatalf("isError=%v, %d images: %s", res.IsError, er.Images, text(res))
		}
		for _, p := range pictures(t, res) {
			cfg, err := png.DecodeConfig(bytes.NewReader(p))
			if err != nil || cfg.Width < 100 || cfg.Height < 100 {
				t.Fatalf("not a figure: %v %+v", err, cfg)
			}
		}
		lines := strings.Split(strings.TrimSpace(er.Stdout), "\n")
		if len(lines) != 4 || !strings.Contains(lines[1], "Oslo") || !strings.Contains(lines[0], "city") {
			t.Fatalf("the table is not shown as text: %q", er.Stdout)
		}
		t0, err := strconv.ParseFloat(lines[3], 64)
		if err != nil {
			t.Fatalf("stdout %q: %v", er.Stdout, err)
		}
		if i > 0 { // the first call builds matplotlib's font cache
			delays = append(delays, float64(got.UnixMicro())/1000-t0*1000)
		}
	}
	// Side by side: what matplotlib itself takes to render the two
	// figures to PNG in a job, and a call that prints one line.
	render := `
import io, time
import matplotlib.pyplot as plt
t0 = time.time()
for f in range(2):
    fig = plt.figure()
    plt.plot([1, 4, 9, 16]) if f == 0 else plt.bar(["a", "b"], [3, 5])
    fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")
    plt.close(fig)
print((time.time() - t0) * 1000)
`
	var renders, prints []float64
	for range 4 {
		_, er := call(t, c, "execute_code", map[string]any{"code": render})
		ms, err := strconv.ParseFloat(strings.TrimSpace(er.Stdout), 64)
		if err != nil {
			t.Fatalf("render: %q %q", er.Stdout, tail(er.Stderr, 200))
		}
		renders = append(renders, ms)
		t0 := time.Now()
		call(t, c, "execute_code", map[string]any{"code": "print(1)"})
		prints = append(prints, float64(time.Since(t0).Microseconds())/1000)
	}
	median := func(v []float64) float64 { slices.Sort(v); return (v[1] + v[2]) / 2 }
	t.Logf("plt.show() to the image in the client: median %.1f ms of 4 calls (%.1f to %.1f); "+
		"matplotlib rendering the two figures to PNG in a job: median %.1f ms; execute_code print(1): median %.1f ms",
		median(delays), delays[0], delays[len(delays)-1], median(renders), median(prints))
}
