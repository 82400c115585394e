package frontend

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// A job result too large for a stdio message keeps the start and the end
// of each stream, cut on whole characters, and fits; a stream the worker
// already kept whole in a file says to read that file; a small stream
// beside a large one stays whole; a result that fits is left as it is.
func TestFitStdioResult(t *testing.T) {
	const limit = 1 << 20
	big := "é" + strings.Repeat("\x01<é>", 200<<10) + "end"
	r := &wire.Result{JobID: "01J0000000000000000000000A", Status: wire.StatusOK, Stdout: big, Stderr: "warn\n",
		StdoutBytes: 8 << 20, StderrBytes: 5, StdoutTruncated: true, StdoutFile: ".codexec/stdout-1.txt"}
	res := fitStdioResult(toolResult(r, ""), limit)
	b, _ := json.Marshal(res)
	if len(b) > limit-stdioRoom {
		t.Fatalf("cut result is %d bytes, more than %d", len(b), limit-stdioRoom)
	}
	er := res.StructuredContent.(ExecResult)
	text := res.Content[0].(mcp.TextContent).Text
	if !strings.HasPrefix(er.Stdout, "é\x01<é>") || !strings.HasSuffix(er.Stdout, "\x01<é>end") || len(er.Stdout) < 32<<10 ||
		!strings.Contains(er.Stdout, "bytes of stdout left out here") || !strings.Contains(er.Stdout, "codexec://workspace/.codexec/stdout-1.txt?offset=N&length=M") ||
		!er.StdoutTruncated || er.StdoutBytes != 8<<20 || er.Stderr != "warn\n" || er.StderrTruncated {
		t.Fatalf("stdout of %d bytes (%.60q ... %.60q), stderr %q, %+v", len(er.Stdout), er.Stdout, er.Stdout[len(er.Stdout)-60:], er.Stderr, er.StdoutTruncated)
	}
	if !strings.Contains(text, er.Stdout) || !strings.Contains(text, "--- stderr ---\nwarn\n") || !strings.Contains(text, "[... stdout truncated: ") {
		t.Fatalf("text: %.300q", text)
	}
	for _, s := range []string{er.Stdout, text} {
		if !json.Valid([]byte(mustJSON(s))) || strings.ContainsRune(s, '\uFFFD') {
			t.Fatalf("a character was split")
		}
	}
	small := toolResult(&wire.Result{JobID: r.JobID, Status: wire.StatusOK, Stdout: strings.Repeat("\x01", 30<<10)}, "")
	if got := fitStdioResult(small, limit); got != small {
		t.Fatal("a result that fits was changed")
	}
}

func mustJSON(s string) string { b, _ := json.Marshal(s); return string(b) }

// get_job_results on stdio: jobs whose outputs together pass one message
// keep their start and end, within it; a job with little output keeps all
// of it. Before, the whole answer was replaced by fitStdio's error.
func TestFitBatchOutputs(t *testing.T) {
	big := "START\n" + strings.Repeat("\x01", 3<<20) + "\nEND\n"
	jobs := []BatchJobResult{
		{JobID: "a", Status: "ok", Stdout: big, Stderr: big},
		{JobID: "b", Status: "ok", Stdout: "small\n"},
		{JobID: "c", Status: "error", Stdout: big, Message: "exit code 1"},
		{JobID: "d", Status: "ok", Stderr: big},
	}
	before, _ := json.Marshal(BatchResult{Status: "ok", Jobs: jobs})
	fitBatchOutputs(jobs, StdioMessageLimit)
	after, _ := json.Marshal(BatchResult{Status: "ok", Jobs: jobs})
	if len(before) <= StdioMessageLimit || len(after) > StdioMessageLimit-stdioRoom {
		t.Fatalf("answer of %d bytes cut to %d, want it within %d", len(before), len(after), StdioMessageLimit-stdioRoom)
	}
	if jobs[1].Stdout != "small\n" || jobs[1].Message != "" {
		t.Errorf("a small job's output was cut: %+v", jobs[1])
	}
	for _, j := range []BatchJobResult{jobs[0], jobs[2], jobs[3]} {
		for _, s := range []string{j.Stdout, j.Stderr} {
			if s == "" {
				continue
			}
			if !strings.HasPrefix(s, "START\n") || !strings.HasSuffix(s, "\nEND\n") || !strings.Contains(s, "bytes of std") {
				t.Errorf("job %s: a stream of %d bytes lost its start, end or the line that says it was cut", j.JobID, len(s))
			}
		}
		if !strings.Contains(j.Message, "output cut") {
			t.Errorf("job %s: message %q does not say its output was cut", j.JobID, j.Message)
		}
	}
	if !strings.HasPrefix(jobs[2].Message, "exit code 1; ") {
		t.Errorf("job c's own message was lost: %q", jobs[2].Message)
	}
}
