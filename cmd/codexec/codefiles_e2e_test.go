package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// These tests drive the code-file tools through mcp-go's client against
// `codexec dev` (stdio and HTTP) and against a cluster of two frontends.

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// runCodexec runs this test binary as `codexec args...` to completion.
func runCodexec(t *testing.T, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("codexec %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A 10 MiB script assembled from 1,000 appends runs, and reads back byte
// for byte through the tool (in parts: over stdio no message passes 8 MiB),
// from the on-disk copy and from the runs history.
func TestCodeFilesDevLargeScript(t *testing.T) {
	t.Parallel()
	dataDir, storage := t.TempDir(), filepath.Join(t.TempDir(), "storage")
	c, _ := devStdio(t, dataDir, "CODE_STORAGE_DIR="+storage)

	head := "import hashlib, sys\nn = 0\n"
	res, fr := callAs[frontend.FileResult](t, c, "initialize_code_file", map[string]any{"content": head, "filename": "big.py"})
	wantPath := filepath.Join(storage, "local", "files", "big.py")
	if res.IsError || fr.FilePath != wantPath {
		t.Fatalf("initialize: isError=%v %+v", res.IsError, fr)
	}
	var want strings.Builder
	want.WriteString(head)
	const pieces, pieceLen = 1000, (10<<20)/1000 + 1 // 10 MiB in all
	for i := range pieces {
		// Non-ASCII and quotes too, so nothing is lost in JSON either way.
		line := fmt.Sprintf("n += 1  # piece %04d \"é\" ", i)
		piece := line + strings.Repeat("x", pieceLen-len(line)-1) + "\n"
		want.WriteString(piece)
		res, fr := callAs[frontend.FileResult](t, c, "append_to_code_file", map[string]any{"file_path": fr.FilePath, "content": piece})
		if res.IsError || fr.Size != int64(want.Len()) {
			t.Fatalf("append %d: isError=%v %+v", i, res.IsError, fr)
		}
	}
	tail := "print(n, hashlib.sha256(open(__file__, 'rb').read()).hexdigest())\n"
	callAs[frontend.FileResult](t, c, "append_to_code_file", map[string]any{"file_path": "big", "content": tail})
	want.WriteString(tail)
	if want.Len() < 10<<20 {
		t.Fatalf("the script is only %d bytes", want.Len())
	}

	res, er := call(t, c, "execute_code_file", map[string]any{"file_path": wantPath, "timeout_seconds": 120})
	if res.IsError || er.Stdout != fmt.Sprintf("%d %s\n", pieces, sha(want.String())) || er.Filename != "big.py" {
		t.Fatalf("execute_code_file: isError=%v %s %q", res.IsError, er.Message, er.Stdout)
	}

	// Over stdio a message carries at most 8 MiB (a client drops the
	// connection past 10): the whole file is refused, saying to read it in
	// parts, and read in parts it is what was sent.
	res, fr = callAs[frontend.FileResult](t, c, "read_code_file", map[string]any{"file_path": wantPath})
	if !res.IsError || fr.Status != "limit" || fr.Size != int64(want.Len()) || !strings.Contains(fr.Message, "read it in parts") {
		t.Fatalf("read_code_file of the whole file over stdio: isError=%v %+v", res.IsError, fr)
	}
	var got strings.Builder
	for parts := 1; ; parts++ {
		res, fr = callAs[frontend.FileResult](t, c, "read_code_file", map[string]any{"file_path": wantPath, "offset": got.Len(), "length": 4 << 20})
		if res.IsError || fr.Offset != int64(got.Len()) || fr.Size != int64(want.Len()) || fr.SHA256 != sha(want.String()) || parts > 3 {
			t.Fatalf("read_code_file, part %d: isError=%v %+v", parts, res.IsError, fr)
		}
		got.WriteString(text(res))
		if !fr.More {
			break
		}
	}
	if got.String() != want.String() {
		t.Fatalf("read_code_file in parts differs from what was sent (%d bytes, want %d)", got.Len(), want.Len())
	}
	if disk, err := os.ReadFile(wantPath); err != nil || string(disk) != want.String() {
		t.Fatalf("on-disk copy under CODE_STORAGE_DIR differs (%v, %d bytes)", err, len(disk))
	}
	// The run is recorded with the code it ran (read back by job id in the
	// smaller tests: another 10 MiB read here would only cost time).
	_, lr := callAs[frontend.ListResult](t, c, "list_code_files", nil)
	if len(lr.Files) != 1 || lr.Files[0].Size != int64(want.Len()) || len(lr.Runs) != 1 || lr.Runs[0].JobID != er.JobID ||
		lr.Runs[0].SourceFile != "big.py" || lr.Runs[0].Size != int64(want.Len()) {
		t.Fatalf("list_code_files: %+v", lr)
	}
	// The worker's copy of the script (under CODE_STORAGE_DIR while the
	// job runs) is gone with the job: the code of the run is kept once, in
	// the run record listed above, not a second time on the worker's disk.
	if ran, _ := filepath.Glob(filepath.Join(storage, "local", er.JobID+"_*")); len(ran) != 0 {
		t.Fatalf("the run's script was left under CODE_STORAGE_DIR: %v", ran)
	}
}

// `codexec dev` restarts between appends: the file continues where it was,
// through the path the first process returned, and export finds everything.
func TestCodeFilesDevRestartBetweenAppends(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	c, _ := devStdio(t, dataDir)
	_, fr := callAs[frontend.FileResult](t, c, "initialize_code_file", map[string]any{"content": "parts = ['one']\n", "filename": "resume"})
	path := fr.FilePath
	if path != filepath.Join(dataDir, "scripts", "local", "files", "resume.py") {
		t.Fatalf("file_path %q", path)
	}
	callAs[frontend.FileResult](t, c, "append_to_code_file", map[string]any{"file_path": path, "content": "parts.append('two')\n"})
	_, first := call(t, c, "execute_code", map[string]any{"code": "print('first run')", "filename": "adhoc"})

	// A job plants a link where the on-disk copy of a code file will go.
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o600); err != nil {
		t.Fatal(err)
	}
	// In the sandbox the scripts directory is read-only to jobs, so the
	// plant itself fails; without one it succeeds and must not be followed.
	plant := fmt.Sprintf("import os\nos.symlink(%q, %q)\nprint('planted')", victim, filepath.Join(filepath.Dir(path), "evil.py"))
	if res, er := call(t, c, "execute_code", map[string]any{"code": plant}); res.IsError && !strings.Contains(er.Stderr, "Read-only file system") && !strings.Contains(er.Stderr, "Permission denied") {
		t.Fatalf("plant: %+v", er)
	}
	if err := c.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	c2, _ := devStdio(t, dataDir)
	res, fr := callAs[frontend.FileResult](t, c2, "append_to_code_file", map[string]any{"file_path": path, "content": "parts.append('three')\nprint(' '.join(parts))\n"})
	if res.IsError {
		t.Fatalf("append after restart: %+v", fr)
	}
	res, er := call(t, c2, "execute_code_file", map[string]any{"file_path": "resume.py"})
	if res.IsError || er.Stdout != "one two three\n" {
		t.Fatalf("execute after restart: isError=%v %+v", res.IsError, er)
	}
	want := "parts = ['one']\nparts.append('two')\nparts.append('three')\nprint(' '.join(parts))\n"
	if res, _ := call(t, c2, "read_code_file", map[string]any{"file_path": path}); text(res) != want {
		t.Fatalf("read after restart: %q", text(res))
	}
	res, fr = callAs[frontend.FileResult](t, c2, "initialize_code_file", map[string]any{"content": "x = 1\n", "filename": "evil.py"})
	if res.IsError {
		t.Fatalf("initialize evil.py: %+v", fr)
	}
	if got, _ := os.ReadFile(victim); string(got) != "untouched" {
		t.Fatalf("initialize_code_file wrote through a planted link: %q", got)
	}
	_, lr := callAs[frontend.ListResult](t, c2, "list_code_files", map[string]any{"max_runs": 10})
	if lr.TotalRuns != 3 || lr.Runs[0].JobID != er.JobID || lr.Runs[2].JobID != first.JobID || lr.Runs[2].Filename != "adhoc.py" {
		t.Fatalf("runs across a restart: %+v", lr.Runs)
	}
	res, fr = callAs[frontend.FileResult](t, c2, "read_code_file", map[string]any{"job_id": first.JobID})
	if res.IsError || text(res) != "print('first run')" || fr.Filename != "adhoc.py" || fr.SourceFile != "" {
		t.Fatalf("read a run of before the restart: %q %+v", text(res), fr)
	}
	if err := c2.Close(); err != nil {
		t.Logf("close: %v", err)
	}

	out := t.TempDir()
	log := runCodexec(t, codexecEnv(), "export", "--data-dir", dataDir, "--out", out)
	if !strings.Contains(log, "local: 2 code files, 3 runs") {
		t.Fatalf("export output:\n%s", log)
	}
	if got, err := os.ReadFile(filepath.Join(out, "local", "files", "resume.py")); err != nil || string(got) != want {
		t.Fatalf("exported file: %q, %v", got, err)
	}
	if got, err := os.ReadFile(filepath.Join(out, "local", "runs", first.JobID+"_adhoc.py")); err != nil || string(got) != "print('first run')" {
		t.Fatalf("exported run: %q, %v", got, err)
	}
}

// Over HTTP every session has its own files: another session cannot reach
// them by name, by path or by job id.
func TestCodeFilesDevHTTPSessionsAreIsolated(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+dataDir, "CODEXEC_VENV="+venvFor(t)), os.Args[0], "dev", "--http", "127.0.0.1:0")
	url := p.waitFor(t, urlRe, 2*time.Minute)
	a, b := httpClient(t, url), httpClient(t, url)

	_, fa := callAs[frontend.FileResult](t, a, "initialize_code_file", map[string]any{"content": "print('secret of a')\n", "filename": "secret.py"})
	_, run := call(t, a, "execute_code_file", map[string]any{"file_path": "secret.py"})
	if run.Stdout != "secret of a\n" {
		t.Fatalf("a's run: %+v", run)
	}
	scopeA := filepath.Base(filepath.Dir(filepath.Dir(fa.FilePath)))
	for _, path := range []string{"secret.py", "secret", fa.FilePath, "codexec://files/secret.py",
		filepath.Join(dataDir, "scripts", scopeA, "files", "secret.py"), "../" + scopeA + "/files/secret.py"} {
		res, fr := callAs[frontend.FileResult](t, b, "read_code_file", map[string]any{"file_path": path})
		if !res.IsError || strings.Contains(text(res), "secret of a") || (fr.Status != "not_found" && fr.Status != "rejected") {
			t.Errorf("session b read a's file via %q: %+v", path, fr)
		}
		res, _ = callAs[frontend.FileResult](t, b, "append_to_code_file", map[string]any{"file_path": path, "content": "print('b was here')\n"})
		if !res.IsError {
			t.Errorf("session b appended to a's file via %q", path)
		}
	}
	if res, _ := callAs[frontend.FileResult](t, b, "read_code_file", map[string]any{"job_id": run.JobID}); !res.IsError || strings.Contains(text(res), "secret") {
		t.Errorf("session b read a's run by job id: %s", text(res))
	}
	if _, lr := callAs[frontend.ListResult](t, b, "list_code_files", nil); len(lr.Files) != 0 || len(lr.Runs) != 0 {
		t.Errorf("session b lists a's state: %+v", lr)
	}
	if res, _ := call(t, a, "read_code_file", map[string]any{"file_path": "secret.py"}); text(res) != "print('secret of a')\n" {
		t.Errorf("a's file changed: %q", text(res))
	}
}

// Two frontends of one cluster serve one session: a file started on one is
// continued on the other, concurrent appends through both lose nothing, and
// runs are listed and exported from either.
func TestClusterCodeFiles(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 1)
	url2 := cl.addFrontend(t)

	one := httpClient(t, cl.mcpURL)
	// The second client carries the first one's MCP session to the other
	// frontend, as a load balancer without sticky sessions would.
	tr, err := transport.NewStreamableHTTP(url2, transport.WithSession(one.GetSessionId()))
	if err != nil {
		t.Fatal(err)
	}
	tr.SetProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	two := client.NewClient(tr, client.WithSession())
	if err := two.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = two.Close() })

	res, fr := callAs[frontend.FileResult](t, one, "initialize_code_file", map[string]any{"content": "lines = []\n", "filename": "shared.py"})
	if res.IsError || fr.FilePath != "codexec://files/shared.py" {
		t.Fatalf("initialize: %+v", fr)
	}
	const each = 100
	var wg sync.WaitGroup
	for i, c := range []*client.Client{one, two} {
		wg.Go(func() {
			for j := range each {
				res, fr := callAs[frontend.FileResult](t, c, "append_to_code_file", map[string]any{
					"file_path": "codexec://files/shared.py", "content": fmt.Sprintf("lines.append('%d-%03d')\n", i, j)})
				if res.IsError {
					t.Errorf("append through frontend %d: %+v", i+1, fr)
					return
				}
			}
		})
	}
	wg.Wait()
	callAs[frontend.FileResult](t, two, "append_to_code_file", map[string]any{"file_path": "shared.py",
		"content": "print(len(lines), len(set(lines)))\n"})
	res, er := call(t, two, "execute_code_file", map[string]any{"file_path": "shared.py"})
	if res.IsError || er.Stdout != fmt.Sprintf("%d %d\n", 2*each, 2*each) {
		t.Fatalf("execute through frontend 2: isError=%v %+v", res.IsError, er)
	}
	res, _ = call(t, one, "read_code_file", map[string]any{"file_path": "shared.py"})
	content := text(res)
	for i := range 2 {
		for j := range each {
			if !strings.Contains(content, fmt.Sprintf("lines.append('%d-%03d')\n", i, j)) {
				t.Fatalf("piece %d-%03d lost", i, j)
			}
		}
	}
	_, lr := callAs[frontend.ListResult](t, one, "list_code_files", nil)
	if len(lr.Files) != 1 || len(lr.Runs) != 1 || lr.Runs[0].JobID != er.JobID {
		t.Fatalf("list through frontend 1: %+v", lr)
	}
	if res, _ := call(t, one, "read_code_file", map[string]any{"job_id": er.JobID}); res.IsError || !strings.Contains(text(res), "print(len(lines)") {
		t.Fatalf("read a run through the other frontend: %s", text(res))
	}

	out := t.TempDir()
	log := runCodexec(t, codexecEnv(), "export", "--redis", cl.redisURL, "--out", out)
	if !strings.Contains(log, "1 code files and 1 runs of 1 sessions") {
		t.Fatalf("export output:\n%s", log)
	}
	matches, _ := filepath.Glob(filepath.Join(out, "*", "files", "shared.py"))
	if len(matches) != 1 {
		t.Fatalf("exported files: %v", matches)
	}
	if got, _ := os.ReadFile(matches[0]); string(got) != content {
		t.Fatalf("exported content differs: %.100q", got)
	}
}
