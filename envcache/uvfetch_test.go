package envcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
)

// realPython returns the absolute path of the interpreter python3 runs
// (not a pyenv shim), so that a test can empty PATH and still build.
func realPython(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable)").Output()
	requireTool(t, "python3", err)
	return strings.TrimSpace(string(out))
}

// requirePyPI skips (fails in CI) when PyPI does not answer.
func requirePyPI(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://pypi.org/simple/uv/", nil)
	resp, err := probeURL(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
	}
	requireTool(t, "PyPI (https://pypi.org)", err)
}

// uvlessCache returns a cache offering uv, on a PATH where no uv is found.
func uvlessCache(t *testing.T, py string, idx IndexConfig) (*Cache, *UV) {
	t.Helper()
	t.Setenv("PATH", t.TempDir())
	u := &UV{}
	dir := t.TempDir()
	c, err := New(Config{Dir: dir, DefaultPython: py, Index: idx,
		Managers: map[string]Manager{envspec.ManagerVenv: &Venv{}, envspec.ManagerUV: u}})
	if err != nil {
		t.Fatal(err)
	}
	return c, u
}

// On a machine without uv, ProvideUV fetches uv's wheel from PyPI with pip,
// points the manager at it, and the manager then works; a second cache on
// the same tools directory reuses the fetched uv without fetching again.
func TestProvideUVFetchesUVFromTheIndex(t *testing.T) {
	requirePyPI(t)
	py := realPython(t)
	c, u := uvlessCache(t, py, IndexConfig{})
	ctx := context.Background()
	if err := u.Available(ctx); err == nil {
		t.Fatal("uv is available before the fetch: the test cannot show the fetch")
	}
	c2, u2 := uvlessCache(t, py, IndexConfig{})
	tools := filepath.Join(t.TempDir(), "tools", "uv")
	bin, err := c.ProvideUV(ctx, tools)
	if err != nil {
		t.Fatal(err)
	}
	if bin != filepath.Join(tools, "bin", "uv") || u.Bin != bin {
		t.Fatalf("ProvideUV = %q, manager Bin %q; want %s/bin/uv for both", bin, u.Bin, tools)
	}
	if err := u.Available(ctx); err != nil {
		t.Fatalf("uv fetched but not available: %v", err)
	}
	before, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c2.ProvideUV(ctx, tools)
	if err != nil || again != bin || u2.Bin != bin {
		t.Fatalf("second ProvideUV = %q, %v (Bin %q); want the fetched %s reused", again, err, u2.Bin, bin)
	}
	after, err := os.Stat(bin)
	if err != nil || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("the second ProvideUV replaced the fetched uv (%v)", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(tools))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".uv-fetch-") {
			t.Errorf("scratch %s left behind", e.Name())
		}
	}
}

// A fetch that cannot reach any index fails with pip's reason, leaves the
// manager without an executable (so the worker builds with pip) and writes
// nothing in place of uv.
func TestProvideUVFailureLeavesManagerUnset(t *testing.T) {
	c, u := uvlessCache(t, realPython(t), IndexConfig{NoIndex: true, FindLinks: []string{t.TempDir()}})
	tools := filepath.Join(t.TempDir(), "tools", "uv")
	_, err := c.ProvideUV(context.Background(), tools)
	if err == nil || errors.Is(err, ErrUVOnPath) {
		t.Fatalf("ProvideUV with no index = %v, want a fetch error", err)
	}
	if !strings.Contains(err.Error(), "fetching uv") {
		t.Errorf("error %q does not say what failed", err)
	}
	if u.Bin != "" {
		t.Errorf("manager Bin = %q after a failed fetch", u.Bin)
	}
	if _, err := os.Stat(tools); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after a failed fetch (%v)", tools, err)
	}
}

// With uv on PATH, or a manager naming its own executable, nothing is
// fetched.
func TestProvideUVLeavesInstalledUVAlone(t *testing.T) {
	py := realPython(t)
	pathDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pathDir, "uv"), []byte("#!/bin/sh\necho uv 0.0.0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", pathDir)
	for _, u := range []*UV{{}, {Bin: "/opt/uv/bin/uv"}} {
		c, err := New(Config{Dir: t.TempDir(), DefaultPython: py, Managers: map[string]Manager{envspec.ManagerUV: u}})
		if err != nil {
			t.Fatal(err)
		}
		want := u.Bin
		if _, err := c.ProvideUV(context.Background(), filepath.Join(t.TempDir(), "uv")); !errors.Is(err, ErrUVOnPath) {
			t.Errorf("ProvideUV with uv installed (Bin %q) = %v, want ErrUVOnPath", want, err)
		}
		if u.Bin != want {
			t.Errorf("Bin changed from %q to %q", want, u.Bin)
		}
	}
}
