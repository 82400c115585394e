package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/mark3labs/mcp-go/client"
)

func createContext(t *testing.T, c *client.Client, args map[string]any) frontend.ContextResult {
	t.Helper()
	res, cr := callAs[frontend.ContextResult](t, c, "create_context", args)
	if res.IsError || cr.ContextID == "" {
		t.Fatalf("create_context: %+v (%s)", cr, text(res))
	}
	return cr
}

func runIn(t *testing.T, c *client.Client, id, code string, timeout float64) frontend.ExecResult {
	t.Helper()
	args := map[string]any{"context_id": id, "code": code}
	if timeout > 0 {
		args["timeout_seconds"] = timeout
	}
	_, er := call(t, c, "run_in_context", args)
	return er
}

// Through an MCP client and `codexec dev` (sandboxed where the machine
// allows, as by default): variables persist between calls and the last bare
// expression's value is shown; a timeout interrupts the code and the context
// goes on; the stateless execute_code is unchanged beside it; a reset empties
// the context; list_contexts lists it; after close_context it is unknown.
func TestDevContext(t *testing.T) {
	t.Parallel()
	c, _ := devStdio(t, t.TempDir())
	cr := createContext(t, c, map[string]any{"name": "nb"})
	if cr.ContextID != "nb" || cr.WorkerID == "" {
		t.Fatalf("create_context: %+v", cr)
	}
	if er := runIn(t, c, "nb", "import math\nx = 41", 0); er.Status != "ok" || er.Stdout != "" {
		t.Fatalf("first call: %+v", er)
	}
	if er := runIn(t, c, "nb", "x += 1; x", 0); er.Status != "ok" || er.Stdout != "42\n" {
		t.Fatalf("x += 1; x: %+v", er)
	}
	if res, er := call(t, c, "execute_code", map[string]any{"code": "print('x' in dir())"}); res.IsError || er.Stdout != "False\n" {
		t.Fatalf("execute_code beside a context: %+v", er)
	}
	er := runIn(t, c, "nb", "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", 0.5)
	if er.Status != "timeout" || er.Stdout != "sleeping\n" || !strings.Contains(er.Stderr, "KeyboardInterrupt") || !strings.Contains(er.Message, "kept") {
		t.Fatalf("timeout: %+v", er)
	}
	if er := runIn(t, c, "nb", "print(x, math.pi > 3)", 0); er.Status != "ok" || er.Stdout != "42 True\n" {
		t.Fatalf("after the timeout: %+v", er)
	}
	if er := runIn(t, c, "nb", "raise ValueError('no')", 0); er.Status != "error" || er.Message != "ValueError: no" || !strings.Contains(er.Stderr, "ValueError: no") {
		t.Fatalf("raise: %+v", er)
	}
	res, list := callAs[frontend.ContextList](t, c, "list_contexts", map[string]any{})
	if res.IsError || len(list.Contexts) != 1 || list.Contexts[0].ContextID != "nb" || list.Contexts[0].State != "live" {
		t.Fatalf("list_contexts: %+v", list)
	}
	if res, rr := callAs[frontend.ContextResult](t, c, "reset_context", map[string]any{"context_id": "nb"}); res.IsError {
		t.Fatalf("reset_context: %+v", rr)
	}
	if er := runIn(t, c, "nb", "'x' in dir()", 0); er.Stdout != "False\n" {
		t.Fatalf("after reset: %+v", er)
	}
	if res, rr := callAs[frontend.ContextResult](t, c, "close_context", map[string]any{"context_id": "nb"}); res.IsError {
		t.Fatalf("close_context: %+v", rr)
	}
	if er := runIn(t, c, "nb", "1", 0); er.Status != "rejected" || !strings.Contains(er.Message, "unknown context") {
		t.Fatalf("after close: %+v", er)
	}
}

// In a two-worker cluster: another session cannot reach a context, and gets
// exactly the answer of a name no session has; when the worker holding the
// context is killed, the next call says the context and its variables were
// lost (never an empty context in its place), and a new context works on
// the other worker.
func TestClusterContextLostWithWorker(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	a := httpClient(t, cl.mcpURL)
	b := httpClient(t, cl.mcpURL)
	cr := createContext(t, a, map[string]any{"name": "data"})
	if er := runIn(t, a, "data", "rows = list(range(10))\nlen(rows)", 0); er.Stdout != "10\n" {
		t.Fatalf("run: %+v", er)
	}

	other := runIn(t, b, "data", "print(rows)", 0)
	never := runIn(t, b, "nosuch", "print(rows)", 0)
	if other.Status != "rejected" || other.Message != strings.Replace(never.Message, "nosuch", "data", 1) || other.Stdout != "" {
		t.Fatalf("another session's call: %+v; a name no session has: %+v", other, never)
	}
	for _, tool := range []string{"reset_context", "close_context"} {
		if res, rr := callAs[frontend.ContextResult](t, b, tool, map[string]any{"context_id": "data"}); !res.IsError || !strings.Contains(rr.Message, "unknown context") {
			t.Fatalf("%s from another session: %+v", tool, rr)
		}
	}
	if _, list := callAs[frontend.ContextList](t, b, "list_contexts", map[string]any{}); len(list.Contexts) != 0 {
		t.Fatalf("another session lists %+v", list.Contexts)
	}

	var idx int
	if _, err := fmt.Sscanf(cr.WorkerID, "w%d", &idx); err != nil || idx < 1 || idx > 2 {
		t.Fatalf("the context is on %q", cr.WorkerID)
	}
	cl.workers[idx-1].signal(syscall.SIGKILL)
	<-cl.workers[idx-1].Exited()
	er := runIn(t, a, "data", "len(rows)", 0)
	if er.Status != "lost" || !strings.Contains(er.Message, "context data was lost") || !strings.Contains(er.Message, cr.WorkerID) ||
		!strings.Contains(er.Message, "variables") || er.Stdout != "" {
		t.Fatalf("after its worker was killed: %+v", er)
	}
	if er := runIn(t, a, "data", "len(rows)", 0); er.Status != "rejected" || !strings.Contains(er.Message, "unknown context") {
		t.Fatalf("the call after the lost one: %+v", er)
	}
	cr2 := createContext(t, a, map[string]any{"name": "data"})
	if cr2.WorkerID == cr.WorkerID {
		t.Fatalf("the new context went to the dead worker %s", cr2.WorkerID)
	}
	if er := runIn(t, a, "data", "'rows' in dir()", 0); er.Stdout != "False\n" {
		t.Fatalf("new context: %+v", er)
	}
}

// A worker that holds --max-contexts ends the least recently used idle
// context to make room, and one idle past --context-idle ends: either way
// list_contexts shows it lost and its next call says why, once.
func TestDevContextEndedByWorker(t *testing.T) {
	t.Parallel()
	c, _ := devStdio(t, t.TempDir(), "CODEXEC_MAX_CONTEXTS=1", "CODEXEC_CONTEXT_IDLE=3s")
	createContext(t, c, map[string]any{"name": "a"})
	runIn(t, c, "a", "v = 1", 0)
	createContext(t, c, map[string]any{"name": "b"})
	_, list := callAs[frontend.ContextList](t, c, "list_contexts", map[string]any{})
	states := map[string]string{}
	for _, e := range list.Contexts {
		states[e.ContextID] = e.State + " " + e.Ended
	}
	if !strings.HasPrefix(states["a"], "lost evicted") || states["b"] != "live " {
		t.Fatalf("list_contexts after b made room: %v", states)
	}
	if er := runIn(t, c, "a", "v", 0); er.Status != "lost" || !strings.Contains(er.Message, "least recently used") {
		t.Fatalf("the evicted context's call: %+v", er)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		_, list = callAs[frontend.ContextList](t, c, "list_contexts", map[string]any{})
		if len(list.Contexts) == 1 && list.Contexts[0].State == "lost" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle context did not end: %+v", list.Contexts)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if er := runIn(t, c, "b", "1", 0); er.Status != "lost" || !strings.Contains(er.Message, "idle") {
		t.Fatalf("the idle context's call: %+v", er)
	}
	if er := runIn(t, c, "b", "1", 0); !strings.Contains(er.Message, "unknown context") {
		t.Fatalf("the call after: %+v", er)
	}
}
