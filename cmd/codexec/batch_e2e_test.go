package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/frontend/auth"
)

// `codexec batch` as a user runs it: this test binary acting as codexec,
// on this machine (embedded) or through an HTTP frontend, its output in a
// pipe or on a pseudo-terminal, its directory read afterwards.

// batchLine is a line of results.jsonl, as the tests read it.
type batchLine struct {
	Row      int64  `json:"row"`
	Name     string `json:"name"`
	JobID    string `json:"job_id"`
	Attempt  int64  `json:"attempt"`
	Status   string `json:"status"`
	ExitCode int    `json:"exit_code"`
	WorkerID string `json:"worker_id"`
}

// batchEnv is the environment of a batch client: an embedded codexec keeps
// its state under dataDir.
func batchEnv(t testing.TB, dataDir string, extra ...string) []string {
	return codexecEnv(append([]string{"CODEXEC_BATCH_DATA_DIR=" + dataDir, "CODEXEC_VENV=" + venvFor(t)}, extra...)...)
}

// runBatchCmd runs `codexec batch args...` to its end with its output in a
// pipe, and returns the output and the exit code.
func runBatchCmd(t testing.TB, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"batch"}, args...)...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("codexec batch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// readResults reads a batch's results.jsonl.
func readResults(t testing.TB, dir string) []batchLine {
	t.Helper()
	return readJSONL[batchLine](t, filepath.Join(dir, "results.jsonl"))
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	return out
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A directory of scripts and a script with a CSV parameter file, on this
// machine, the output in a pipe: plain progress lines, per job its stdout,
// stderr and status, one results.jsonl; the failed script makes the
// command exit 1. Run again, the batch submits nothing and says every job
// finished before; status finds it by its id.
func TestBatchEmbedded(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	dataDir := filepath.Join(tmp, "data")
	env := batchEnv(t, dataDir)
	scripts := filepath.Join(tmp, "scripts")
	writeFiles(t, scripts, map[string]string{
		"a.py":      "print('from a')\n",
		"b.py":      "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)\n",
		"c.py":      "print(sum(range(10)))\n",
		"notes.txt": "not a script\n",
	})
	out := filepath.Join(tmp, "out")
	args := []string{"--dir", scripts, "--out", out, "--progress-every", "100ms"}
	text, rc := runBatchCmd(t, env, args...)
	if rc != 1 || strings.Contains(text, "\r") || !regexp.MustCompile(`(?m)^batch \w+: 3/3 finished: ok 2, failed 1`).MatchString(text) {
		t.Fatalf("exit %d, want 1 (one job failed), and plain progress lines:\n%s", rc, text)
	}
	lines := readResults(t, out)
	want := map[string]string{"000000-a": "ok", "000001-b": "error", "000002-c": "ok"}
	if len(lines) != 3 {
		t.Fatalf("results.jsonl has %d lines, want 3: %+v", len(lines), lines)
	}
	for _, l := range lines {
		if want[l.Name] != l.Status {
			t.Errorf("%s: status %s, want %s", l.Name, l.Status, want[l.Name])
		}
	}
	for name, stdout := range map[string]string{"000000-a/stdout": "from a\n", "000001-b/stderr": "oops\n", "000002-c/stdout": "45\n"} {
		if got := readFile(t, filepath.Join(out, "jobs", name)); got != stdout {
			t.Errorf("%s: %q, want %q", name, got, stdout)
		}
	}
	if st := readFile(t, filepath.Join(out, "jobs", "000001-b", "status.json")); !strings.Contains(st, `"exit_code": 3`) {
		t.Errorf("status.json of the failed job: %s", st)
	}

	submitted := readFile(t, filepath.Join(out, "submitted.jsonl"))
	text, rc = runBatchCmd(t, env, args...)
	if rc != 1 || !strings.Contains(text, "3 jobs (3 finished before)") {
		t.Fatalf("run again: exit %d:\n%s", rc, text)
	}
	if got := readFile(t, filepath.Join(out, "submitted.jsonl")); got != submitted {
		t.Errorf("run again submitted jobs:\n%s\nwant only the first run's:\n%s", got, submitted)
	}
	if n := len(readResults(t, out)); n != 3 {
		t.Errorf("run again: results.jsonl has %d lines, want 3", n)
	}
	var spec struct{ ID string }
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "batch.json"))), &spec); err != nil {
		t.Fatal(err)
	}
	text, rc = runBatchCmd(t, env, "status", spec.ID)
	if rc != 0 || !strings.Contains(text, "("+"finished): 3/3 finished: ok 2, failed 1") {
		t.Errorf("status %s: exit %d:\n%s", spec.ID, rc, text)
	}

	// One script, a row per job; the row reaches it as JSON.
	writeFiles(t, tmp, map[string]string{
		"square.py":  "import json, os\np = json.loads(os.environ['CODEXEC_PARAMS'])\nprint(p['name'], int(p['n']) ** 2)\n",
		"params.csv": "name,n\nfour,4\nseven,7\n",
	})
	out2 := filepath.Join(tmp, "out2")
	text, rc = runBatchCmd(t, env, "--script", filepath.Join(tmp, "square.py"), "--params", filepath.Join(tmp, "params.csv"), "--out", out2)
	if rc != 0 {
		t.Fatalf("parameter batch: exit %d:\n%s", rc, text)
	}
	for name, stdout := range map[string]string{"000000": "four 16\n", "000001": "seven 49\n"} {
		if got := readFile(t, filepath.Join(out2, "jobs", name, "stdout")); got != stdout {
			t.Errorf("row %s: %q, want %q", name, got, stdout)
		}
	}
}

// Through an HTTP frontend that authenticates with API tokens: the batch
// runs with its token; without one the client is refused; another
// principal's get_job_results does not see the batch's jobs. The tenant's
// quota of one job at once holds for the batch: its second row is
// deferred, and queued once the first's result has given its place back.
func TestBatchThroughHTTPWithToken(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	bob, lineB, _ := auth.NewToken("acme", "bob")
	tmp := t.TempDir()
	tokens := filepath.Join(tmp, "tokens")
	writeTokens(t, tokens, lineA, lineB)
	p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+filepath.Join(tmp, "server"), "CODEXEC_VENV="+venvFor(t)), os.Args[0],
		"dev", "--http", "127.0.0.1:0", "--auth", "tokens", "--auth-tokens", tokens, "--quota", "jobs=1")
	url := p.waitFor(t, urlRe, 2*time.Minute)

	writeFiles(t, tmp, map[string]string{"job.py": "import json, os\nprint(json.loads(os.environ['CODEXEC_PARAMS'])['x'] + 1)\n" +
		"open(os.path.join(os.environ['CODEXEC_OUTPUT_DIR'], 'y.txt'), 'w').write('secret')\n",
		"rows.jsonl": "{\"x\": 1}\n\n{\"x\": 41}\n"})
	env := batchEnv(t, filepath.Join(tmp, "client"))
	args := []string{"--script", filepath.Join(tmp, "job.py"), "--params", filepath.Join(tmp, "rows.jsonl"), "--url", url}
	if text, rc := runBatchCmd(t, env, append(args, "--out", filepath.Join(tmp, "refused"))...); rc == 0 {
		t.Fatalf("a batch without a token ran:\n%s", text)
	}
	out := filepath.Join(tmp, "out")
	text, rc := runBatchCmd(t, append(env, "CODEXEC_TOKEN="+alice), append(args, "--out", out)...)
	if rc != 0 || !strings.Contains(text, `rows wait for the tenant's quota (not queued: quota jobs of tenant "acme" reached`) {
		t.Fatalf("exit %d, want 0 after a row deferred by the quota of jobs:\n%s", rc, text)
	}
	lines := readResults(t, out)
	if len(lines) != 2 {
		t.Fatalf("results: %+v", lines)
	}
	for i, want := range []string{"2\n", "42\n"} {
		if got := readFile(t, filepath.Join(out, "jobs", fmt.Sprintf("%06d", i), "stdout")); got != want {
			t.Errorf("row %d: %q, want %q", i, got, want)
		}
	}
	if got := readFile(t, filepath.Join(out, "jobs", "000000", "files", "y.txt")); got != "secret" {
		t.Errorf("row 0: files/y.txt %q, want what the job wrote", got)
	}

	var spec struct{ ID string }
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "batch.json"))), &spec); err != nil {
		t.Fatal(err)
	}
	c, err := connectAs(url, bob)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	type jobs struct {
		Jobs []struct{ Status, Stdout string }
	}
	res, got := callAs[jobs](t, c, "get_job_results", map[string]any{"batch_id": spec.ID, "job_ids": []string{lines[0].JobID}})
	if len(got.Jobs) != 1 || got.Jobs[0].Status != "unknown" || got.Jobs[0].Stdout != "" {
		raw, _ := json.Marshal(res.StructuredContent)
		t.Errorf("bob read alice's batch job: %s", raw)
	}
	req := mcp.ReadResourceRequest{}
	req.Params.URI = "codexec://workspace/out/0/y.txt?batch=" + spec.ID
	if rr, err := c.ReadResource(context.Background(), req); err == nil {
		t.Errorf("bob read a file of alice's batch: %+v", rr.Contents)
	}
}

// On a terminal the progress is a bar redrawn in place, read here from a
// real pseudo-terminal.
func TestBatchProgressOnTerminal(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	writeFiles(t, filepath.Join(tmp, "scripts"), map[string]string{"a.py": "print(1)\n", "b.py": "print(2)\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "batch", "--dir", filepath.Join(tmp, "scripts"), "--out", filepath.Join(tmp, "out"))
	cmd.Env = batchEnv(t, filepath.Join(tmp, "data"))
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 160})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var buf bytes.Buffer
	_, _ = io.Copy(&buf, tty) // until the process exits (EIO)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v:\n%s", err, buf.String())
	}
	text := buf.String()
	if !strings.Contains(text, "\r") || !strings.Contains(text, "ok 2, failed 0, running 0, queued 0") ||
		!strings.Contains(text, "100%") || strings.Contains(text, "finished: ok") {
		t.Errorf("want a bar redrawn with \\r reaching 100%% with the counts, and no plain lines; got %q", text)
	}
}

// A client killed (SIGKILL, and with it the embedded codexec and the job it
// ran) in the middle of a batch, then started again: every row ends with
// one result, and no row finished or submitted before is submitted again.
//
// It does not run in parallel with the package's other tests: on a loaded
// machine (the race detector, every e2e test at once) rows submitted just
// before the kill were seen to stay unfinished after the resume, which is
// under investigation; the log of both runs is printed when that happens.
func TestBatchResumedAfterClientKilled(t *testing.T) {
	tmp := t.TempDir()
	rows := strings.Repeat("{\"s\": 0.5}\n", 10)
	writeFiles(t, tmp, map[string]string{"sleep.py": "import json, os, time\ntime.sleep(json.loads(os.environ['CODEXEC_PARAMS'])['s'])\nprint('done')\n",
		"rows.jsonl": rows})
	out := filepath.Join(tmp, "out")
	env := batchEnv(t, filepath.Join(tmp, "data"), "CODEXEC_ACK_WAIT=2s")
	args := []string{"--script", filepath.Join(tmp, "sleep.py"), "--params", filepath.Join(tmp, "rows.jsonl"), "--out", out, "--parallel", "3"}
	p := startProc(t, env, os.Args[0], append([]string{"batch"}, args...)...)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		data, _ := os.ReadFile(filepath.Join(out, "results.jsonl"))
		if bytes.Count(data, []byte("\n")) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no results after 3 minutes:\n%s", p.Out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.signal(syscall.SIGKILL)
	<-p.Exited()
	before := readResults(t, out)
	sentBefore := readJSONL[batchLine](t, filepath.Join(out, "submitted.jsonl"))

	text, rc := runBatchCmd(t, env, args...)
	if rc != 0 {
		logs, _ := os.ReadFile(filepath.Join(tmp, "data", "codexec.log"))
		t.Fatalf("resumed: exit %d:\n%s\nlog of both runs:\n%s", rc, text, logs)
	}
	lines := readResults(t, out)
	rowsSeen := map[int64]int{}
	for _, l := range lines {
		rowsSeen[l.Row]++
		if l.Status != "ok" {
			t.Errorf("row %d: %s", l.Row, l.Status)
		}
	}
	if len(rowsSeen) != 10 || len(lines) != 10 {
		t.Errorf("rows finished: %v (%d lines), want each of 10 once", rowsSeen, len(lines))
	}
	sent := map[int64]int{}
	for _, s := range readJSONL[batchLine](t, filepath.Join(out, "submitted.jsonl")) {
		sent[s.Row]++
	}
	for _, s := range sentBefore {
		if sent[s.Row] != 1 {
			t.Errorf("row %d, submitted before the kill, was submitted %d times", s.Row, sent[s.Row])
		}
	}
	t.Logf("%d rows finished and %d submitted before the kill", len(before), len(sentBefore))
}

// A worker killed (SIGKILL) in the middle of a batch on a cluster loses no
// job: its jobs run again on the other worker, and every row ends ok.
func TestBatchWorkerKilled(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	tmp := t.TempDir()
	writeFiles(t, tmp, map[string]string{"sleep.py": "import time\ntime.sleep(1.5)\nprint('done')\n",
		"rows.jsonl": strings.Repeat("{}\n", 6)})
	out := filepath.Join(tmp, "out")
	p := startProc(t, batchEnv(t, filepath.Join(tmp, "client")), os.Args[0], "batch", "--url", cl.mcpURL,
		"--script", filepath.Join(tmp, "sleep.py"), "--params", filepath.Join(tmp, "rows.jsonl"), "--out", out, "--progress-every", "1s")
	cl.workers[0].waitFor(t, regexp.MustCompile(`msg="job started"`), 2*time.Minute)
	cl.workers[0].signal(syscall.SIGKILL)
	select {
	case <-p.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatalf("the batch did not finish:\n%s", p.Out.String())
	}
	if rc := p.Cmd.ProcessState.ExitCode(); rc != 0 {
		t.Fatalf("exit %d:\n%s", rc, p.Out.String())
	}
	lines := readResults(t, out)
	if len(lines) != 6 {
		t.Fatalf("%d results, want 6 (jobs lost): %+v", len(lines), lines)
	}
	for _, l := range lines {
		if l.Status != "ok" || l.Attempt != 0 || l.WorkerID != "w2" {
			t.Errorf("row %d: %+v, want ok on w2 at the first attempt (run again by the queue, not by the client)", l.Row, l)
		}
	}
}

// `codexec batch cancel ID` from another terminal, while the batch runs on
// this machine: the client stops submitting, the jobs running are stopped
// and those queued not started, all of them end cancelled, and the batch
// reads cancelled. Each job would sleep a minute: one that was not stopped
// would end ok.
func TestBatchCancel(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	writeFiles(t, tmp, map[string]string{"sleep.py": "import time\ntime.sleep(60)\nprint('ran')\n",
		"rows.jsonl": strings.Repeat("{}\n", 40)})
	out, data := filepath.Join(tmp, "out"), filepath.Join(tmp, "data")
	env := batchEnv(t, data, "CODEXEC_CONCURRENCY=2")
	p := startProc(t, env, os.Args[0], "batch", "--script", filepath.Join(tmp, "sleep.py"),
		"--params", filepath.Join(tmp, "rows.jsonl"), "--out", out, "--parallel", "8")
	id := p.waitFor(t, regexp.MustCompile(`batch (\w+): 40 jobs`), 3*time.Minute)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if log, _ := os.ReadFile(filepath.Join(data, "codexec.log")); bytes.Count(log, []byte(`msg="job started"`)) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no job started:\n%s", p.Out.String())
		}
	}
	if text, rc := runBatchCmd(t, env, "cancel", id); rc != 0 {
		t.Fatalf("cancel: exit %d:\n%s", rc, text)
	}
	select {
	case <-p.Exited():
	case <-time.After(3 * time.Minute):
		t.Fatalf("the batch did not end after it was cancelled:\n%s", p.Out.String())
	}
	lines := readResults(t, out)
	if len(lines) == 0 || len(lines) >= 40 {
		t.Errorf("%d rows finished, want those submitted (at most 8 at once), not all 40", len(lines))
	}
	for _, l := range lines {
		if l.Status != "cancelled" || readFile(t, filepath.Join(out, "jobs", l.Name, "stdout")) != "" {
			t.Errorf("row %d: %s, want cancelled without output", l.Row, l.Status)
		}
	}
	if text, _ := runBatchCmd(t, env, "status", id); !strings.Contains(text, "(cancelled)") {
		t.Errorf("status after cancel:\n%s", text)
	}
}
