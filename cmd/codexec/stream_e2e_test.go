package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/mark3labs/mcp-go/mcp"
)

// A call that sends a progress token follows its job's output while it
// runs: progress notifications carry the output so far, in order, before
// the result; a call without a token gets none of them.
func TestDevOutputStreamedAsProgress(t *testing.T) {
	t.Parallel()
	env := codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t))
	p := startProc(t, env, os.Args[0], "dev", "--http", "127.0.0.1:0")
	c := httpClient(t, p.waitFor(t, urlRe, time.Minute))

	notes := make(chan string, 64)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if msg, _ := n.Params.AdditionalFields["message"].(string); n.Method == "notifications/progress" {
			notes <- msg
		}
	})
	// Each step waits for the step before it to have been seen by the
	// client (a file the test writes), so the output reaches the client
	// while the job runs, whatever the machine's load.
	code := `import os, sys, time
for i in range(3):
    print("step", i, flush=True)
    print("note", i, file=sys.stderr, flush=True)
    deadline = time.time() + 60
    while not os.path.exists(f"seen-{i}") and time.time() < deadline:
        time.sleep(0.05)
print("done")
`
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "execute_code", map[string]any{"code": code}
	req.Params.Meta = &mcp.Meta{ProgressToken: "stream-1"}
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := c.CallTool(ctx, req)
		answered <- answer{res, err}
	}()
	var jobID string
	for i := 0; i < 3; i++ {
		want := "step " + string(rune('0'+i))
		for seen := false; !seen; {
			select {
			case msg := <-notes:
				if strings.HasPrefix(msg, "job ") && jobID == "" {
					jobID = strings.Fields(msg)[1]
					continue
				}
				if strings.Contains(msg, "[stdout]") && strings.Contains(msg, want) {
					seen = true
				}
			case a := <-answered:
				t.Fatalf("the call answered before %q was streamed: %v %s", want, a.err, e2e.Text(a.res))
			case <-ctx.Done():
				t.Fatalf("no progress notification with %q", want)
			}
		}
		if jobID == "" {
			t.Fatal("no job id announced before the output")
		}
		// Tell the job, in the session's working directory (a second call
		// of the same session, beside the first), that step i was seen.
		mark := map[string]any{"code": "open('seen-" + string(rune('0'+i)) + "', 'w').close()"}
		if res, er := call(t, c, "execute_code", mark); res.IsError {
			t.Fatalf("marking step %d: %+v", i, er)
		}
	}
	a := <-answered
	if a.err != nil {
		t.Fatal(a.err)
	}
	var er frontend.ExecResult
	if err := e2e.Decode(a.res, &er); err != nil || er.Stdout != "step 0\nstep 1\nstep 2\ndone\n" {
		t.Fatalf("result: %+v, %v", er, err)
	}
}
