package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// These tests drive `codexec dev` through mcp-go's client over real stdio
// and real Streamable HTTP, the way an MCP client configured from the README
// does.

func TestDevStdioExecute(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	c, _ := devStdio(t, dataDir, "AWS_SECRET_ACCESS_KEY=hunter2", "CODEXEC_NATS_URL=nats://secret@127.0.0.1:1")

	t.Run("print", func(t *testing.T) {
		res, er := call(t, c, "execute_code", map[string]any{"code": "print(1)"})
		if res.IsError || er.Status != "ok" || er.Stdout != "1\n" || er.ExitCode != 0 {
			t.Fatalf("print(1): isError=%v %+v", res.IsError, er)
		}
		if er.JobID == "" || er.WorkerID == "" || er.DurationMS <= 0 {
			t.Fatalf("missing job id, worker or duration: %+v", er)
		}
		if !strings.HasPrefix(text(res), "1\n") {
			t.Fatalf("text content %q", text(res))
		}
	})
	t.Run("exception keeps stdout and user line numbers", func(t *testing.T) {
		code := "print('before')\n\n\ndef f():\n    raise ValueError('boom')\nf()\n"
		res, er := call(t, c, "execute_code", map[string]any{"code": code, "filename": "fails.py"})
		if !res.IsError || er.Status != "error" || er.ExitCode != 1 {
			t.Fatalf("want error exit 1, got isError=%v %+v", res.IsError, er)
		}
		if er.Stdout != "before\n" {
			t.Fatalf("stdout dropped: %q", er.Stdout)
		}
		if !strings.Contains(er.Stderr, "line 5, in f") || !strings.Contains(er.Stderr, "line 6, in <module>") || !strings.Contains(er.Stderr, "fails.py") {
			t.Fatalf("traceback lacks the user's file and lines:\n%s", er.Stderr)
		}
		if !strings.Contains(er.Stderr, "ValueError: boom") || !strings.Contains(text(res), "before") {
			t.Fatalf("text content: %s", text(res))
		}
	})
	t.Run("stderr on success is not an error", func(t *testing.T) {
		res, er := call(t, c, "execute_code", map[string]any{"code": "import sys\nprint('out')\nprint('warn', file=sys.stderr)"})
		if res.IsError || er.Stdout != "out\n" || er.Stderr != "warn\n" {
			t.Fatalf("isError=%v %+v", res.IsError, er)
		}
	})
	t.Run("exit code", func(t *testing.T) {
		res, er := call(t, c, "execute_code", map[string]any{"code": "import sys; print('x'); sys.exit(3)"})
		if !res.IsError || er.ExitCode != 3 || er.Stdout != "x\n" {
			t.Fatalf("isError=%v %+v", res.IsError, er)
		}
	})
	t.Run("timeout kills the process group", func(t *testing.T) {
		code := "import subprocess, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" +
			"p = subprocess.Popen(['sleep', '300'])\nopen('child.pid','w').write(str(p.pid))\nprint('started', flush=True)\nwhile True: pass\n"
		start := time.Now()
		res, er := call(t, c, "execute_code", map[string]any{"code": code, "timeout_seconds": 1.5})
		if !res.IsError || er.Status != "timeout" || er.Stdout != "started\n" {
			t.Fatalf("isError=%v %+v", res.IsError, er)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("timeout took %s", d)
		}
		_, chk := call(t, c, "execute_code", map[string]any{"code": "import os\npid=int(open('child.pid').read())\n" +
			"try:\n    os.kill(pid, 0); st=open(f'/proc/{pid}/stat').read().split()[2]; print('alive', st)\nexcept ProcessLookupError:\n    print('gone')"})
		if chk.Stdout != "gone\n" && !strings.HasPrefix(chk.Stdout, "alive Z") {
			t.Fatalf("background child outlived the timeout: %q", chk.Stdout)
		}
	})
	t.Run("environment is scrubbed", func(t *testing.T) {
		_, er := call(t, c, "execute_code", map[string]any{"code": "import os\nprint(sorted(k for k in os.environ))\nprint(os.environ.get('AWS_SECRET_ACCESS_KEY'), os.environ.get('CODEXEC_NATS_URL'))"})
		if strings.Contains(er.Stdout, "CODEXEC") || strings.Contains(er.Stdout, "AWS") || strings.Contains(er.Stdout, "hunter2") || !strings.Contains(er.Stdout, "None None") {
			t.Fatalf("worker settings leaked into the job: %s", er.Stdout)
		}
	})
	t.Run("working directory persists within the session", func(t *testing.T) {
		call(t, c, "execute_code", map[string]any{"code": "open('state.txt','w').write('kept')"})
		_, er := call(t, c, "execute_code", map[string]any{"code": "import os; print(open('state.txt').read(), os.getcwd().startswith(" + fmt.Sprintf("%q", dataDir) + "))"})
		if er.Stdout != "kept True\n" {
			t.Fatalf("got %q", er.Stdout)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		for _, args := range []map[string]any{
			{}, {"code": ""}, {"code": "   \n"}, {"code": 42}, {"code": "print(1)", "timeout_seconds": -1},
			{"code": "print(1)", "timeout_seconds": "10"}, {"code": "print(1)", "timeout_seconds": 1e9}, {"code": "print(1)", "filename": 7},
		} {
			res, er := call(t, c, "execute_code", args)
			if !res.IsError || er.Status != "rejected" || er.Message == "" {
				t.Errorf("args %v: want a rejected error, got isError=%v %+v", args, res.IsError, er)
			}
		}
	})
	t.Run("hostile filename stays in the session's scripts", func(t *testing.T) {
		res, er := call(t, c, "execute_code", map[string]any{"code": "import os\nprint(__file__, os.path.isfile(__file__))", "filename": "../../../../etc/cron.d/evil"})
		if res.IsError || er.Filename != "etc_cron.d_evil.py" {
			t.Fatalf("isError=%v %+v", res.IsError, er)
		}
		// The script ran from the session's scripts directory ...
		script := filepath.Join(dataDir, "scripts", "local", er.JobID+"_etc_cron.d_evil.py")
		if er.Stdout != script+" True\n" {
			t.Fatalf("the job ran %q, want %s", er.Stdout, script)
		}
		// ... and is not kept once the job is done (every script
		// stayed on the worker's disk).
		matches, _ := filepath.Glob(filepath.Join(dataDir, "scripts", "local", "*_etc_cron.d_evil.py"))
		if len(matches) != 0 {
			t.Fatalf("scripts kept after their jobs: %v", matches)
		}
	})
	t.Run("4 MiB of code runs and oversize code is refused", func(t *testing.T) {
		big := "x = 1\n" + strings.Repeat("# padding padding padding padding padding padding padding\n", 4<<20/58) + "print(len(open(__file__).read()) > 4_000_000)\n"
		res, er := call(t, c, "execute_code", map[string]any{"code": big})
		if res.IsError || er.Stdout != "True\n" {
			t.Fatalf("4 MiB job: isError=%v %s", res.IsError, er.Message)
		}
		res, er = call(t, c, "execute_code", map[string]any{"code": strings.Repeat("#", 16<<20+1)})
		if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, "limit") {
			t.Fatalf("oversize: isError=%v %+v", res.IsError, er)
		}
	})
	t.Run("output flood is capped", func(t *testing.T) {
		res, er := call(t, c, "execute_code", map[string]any{"code": "import sys\nfor _ in range(200): sys.stdout.write('y' * 100_000)\nprint('done', file=sys.stderr)"})
		if res.IsError || !er.StdoutTruncated || er.StdoutBytes != 20_000_000 || len(er.Stdout) > 1<<20 || len(er.Stdout) < 1<<20-256 || er.Stderr != "done\n" {
			t.Fatalf("isError=%v truncated=%v bytes=%d len=%d stderr=%q", res.IsError, er.StdoutTruncated, er.StdoutBytes, len(er.Stdout), er.Stderr)
		}
		if !strings.Contains(text(res), "stdout truncated") {
			t.Fatal("no visible truncation marker in the text content")
		}
	})
	t.Run("get_job_result", func(t *testing.T) {
		_, first := call(t, c, "execute_code", map[string]any{"code": "print('again')"})
		res, er := call(t, c, "get_job_result", map[string]any{"job_id": first.JobID})
		if res.IsError || er.Stdout != "again\n" || er.JobID != first.JobID {
			t.Fatalf("isError=%v %+v", res.IsError, er)
		}
		res, _ = call(t, c, "get_job_result", map[string]any{"job_id": "../../etc/passwd"})
		if !res.IsError {
			t.Fatal("a malformed job id was accepted")
		}
	})
}

func TestDevStdioStateSurvivesRestart(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	c, _ := devStdio(t, dataDir)
	_, first := call(t, c, "execute_code", map[string]any{"code": "open('f.txt','w').write('persisted'); print('one')"})
	if err := c.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	c2, _ := devStdio(t, dataDir)
	_, er := call(t, c2, "execute_code", map[string]any{"code": "print(open('f.txt').read())"})
	if er.Stdout != "persisted\n" {
		t.Fatalf("session directory lost across a restart: %+v", er)
	}
	res, again := call(t, c2, "get_job_result", map[string]any{"job_id": first.JobID})
	if res.IsError || again.Stdout != "one\n" {
		t.Fatalf("result lost across a restart: %+v", again)
	}
}

func TestDevHTTPSessionsAreIsolated(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+dataDir, "CODEXEC_VENV="+venvFor(t)), os.Args[0], "dev", "--http", "127.0.0.1:0")
	url := p.waitFor(t, urlRe, 2*time.Minute)

	a := httpClient(t, url)
	b := httpClient(t, url)
	_, er := call(t, a, "execute_code", map[string]any{"code": "import os\nopen('mine.txt','w').write('a')\nprint(os.getcwd())"})
	cwdA := strings.TrimSpace(er.Stdout)
	_, er = call(t, b, "execute_code", map[string]any{"code": "import os\nprint(os.path.exists('mine.txt'), os.getcwd())"})
	if !strings.HasPrefix(er.Stdout, "False ") || strings.TrimSpace(strings.TrimPrefix(er.Stdout, "False ")) == cwdA {
		t.Fatalf("sessions share a working directory: a=%s b=%q", cwdA, er.Stdout)
	}
	_, er = call(t, a, "execute_code", map[string]any{"code": "print(open('mine.txt').read())"})
	if er.Stdout != "a\n" {
		t.Fatalf("session a lost its file: %+v", er)
	}
	// Session b cannot fetch session a's results by id.
	_, aJob := call(t, a, "execute_code", map[string]any{"code": "print('secret')"})
	res, er := call(t, b, "get_job_result", map[string]any{"job_id": aJob.JobID})
	if !res.IsError || strings.Contains(er.Stdout, "secret") {
		t.Fatalf("session b read session a's result: %+v", er)
	}
}

// Clients of the sessionless protocol revision (2026-07-28) have no session
// id: their state belongs to the principal their Authorization header names.
func TestDevHTTPSessionlessPrincipals(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+dataDir, "CODEXEC_VENV="+venvFor(t)), os.Args[0], "dev", "--http", "127.0.0.1:0")
	url := p.waitFor(t, urlRe, 2*time.Minute)
	as := func(token string) *client.Client {
		return httpClientVersion(t, url, mcp.LATEST_PROTOCOL_VERSION, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	one, oneAgain, two := as("one"), as("one"), as("two")
	call(t, one, "execute_code", map[string]any{"code": "open('p.txt','w').write('one')"})
	_, er := call(t, oneAgain, "execute_code", map[string]any{"code": "print(open('p.txt').read())"})
	if er.Stdout != "one\n" {
		t.Fatalf("same principal, different connection: %+v", er)
	}
	_, er = call(t, two, "execute_code", map[string]any{"code": "import os; print(os.path.exists('p.txt'))"})
	if er.Stdout != "False\n" {
		t.Fatalf("another principal sees the first one's files: %+v", er)
	}
}
