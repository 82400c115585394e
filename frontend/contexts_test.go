package frontend

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// A context whose worker is gone (nobody serves its subject) is lost: the
// call says so, names the worker, and forgets it, so the next call finds an
// unknown name. A record the worker marked ended is lost with its reason. A
// name that is not a context name is unknown, as a name no session has.
func TestRunInContextLost(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	put := func(id string, rec wire.ContextRecord) {
		data, _ := json.Marshal(rec)
		if err := jb.f.store.HSet(t.Context(), jb.f.cfg.Keys.Contexts("local"), id, data); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id string) ExecResult {
		_, er := callTool[ExecResult](t, jb.c, "run_in_context", map[string]any{"context_id": id, "code": "x"})
		return er
	}
	put("c1", wire.ContextRecord{V: wire.Version, Worker: "w-gone", EnvID: "default", CreatedAt: time.Now()})
	if er := run("c1"); er.Status != "lost" || !strings.Contains(er.Message, "context c1 was lost: worker w-gone") {
		t.Fatalf("worker gone: %+v", er)
	}
	if _, err := jb.f.store.HGet(t.Context(), jb.f.cfg.Keys.Contexts("local"), "c1"); err != statestore.ErrNotFound {
		t.Fatalf("the lost context's record: %v, want it gone", err)
	}
	if er := run("c1"); er.Status != "rejected" || !strings.Contains(er.Message, `unknown context "c1"`) {
		t.Fatalf("after lost: %+v", er)
	}
	put("c2", wire.ContextRecord{V: wire.Version, Worker: "w-gone", Ended: "it was idle for 30m0s"})
	if er := run("c2"); er.Status != "lost" || !strings.Contains(er.Message, "it ended: it was idle for 30m0s") {
		t.Fatalf("ended: %+v", er)
	}
	bad, never := run("../c1"), run("c9")
	if bad.Status != "rejected" || bad.Message != strings.Replace(never.Message, "c9", "../c1", 1) {
		t.Fatalf("a bad name: %+v; an unknown one: %+v", bad, never)
	}
}

// A call in a context is no job of the results store: get_job_result and
// read_code_file know no id of it. Its result names none, then, where it
// named the id the worker gave its answer, which those tools answered "no
// job ... in this session: it was never submitted here"; it still says how
// long the call took and where.
func TestRunInContextNamesNoJobID(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	data, _ := json.Marshal(wire.ContextRecord{V: wire.Version, Worker: "w1", EnvID: "default", CreatedAt: time.Now()})
	if err := jb.f.store.HSet(t.Context(), jb.f.cfg.Keys.Contexts("local"), "c1", data); err != nil {
		t.Fatal(err)
	}
	stop, err := jb.b.ServeContexts(jb.f.cfg.Pool, "w1", func([]byte) []byte {
		out, _ := json.Marshal(wire.ContextReply{V: wire.Version, Result: &wire.Result{V: wire.Version,
			JobID: "01KC0000000000000000000001", Scope: "local", Status: wire.StatusOK, Stdout: "42\n", DurationMS: 1.5, WorkerID: "w1"}})
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	res, er := callTool[ExecResult](t, jb.c, "run_in_context", map[string]any{"context_id": "c1", "code": "x"})
	text := res.Content[0].(mcp.TextContent).Text
	if er.Status != "ok" || er.Stdout != "42\n" || er.JobID != "" || strings.Contains(text, "job ") ||
		!strings.Contains(text, "1.5 ms on w1") {
		t.Fatalf("run_in_context: %+v, text %q; want no job id, and the time and worker in the text", er, text)
	}
}

// A run tells the worker when its caller stops waiting (the worker then
// starts no run that could not answer in time) and names itself, and the
// interrupt sent when its caller goes away names the same call, so that
// the worker stops that call and no other of the context. Before, a run
// carried neither: one that waited behind another call ran after its
// caller was told that no answer came, and a caller that went away while
// its call waited stopped the other call instead.
func TestRunInContextNamesItsCallAndDeadline(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	data, _ := json.Marshal(wire.ContextRecord{V: wire.Version, Worker: "w1", EnvID: "default", CreatedAt: time.Now()})
	if err := jb.f.store.HSet(t.Context(), jb.f.cfg.Keys.Contexts("local"), "c1", data); err != nil {
		t.Fatal(err)
	}
	runs, interrupts := make(chan wire.ContextRequest, 4), make(chan wire.ContextRequest, 4)
	release := make(chan struct{})
	stop, err := jb.b.ServeContexts(jb.f.cfg.Pool, "w1", func(data []byte) []byte {
		var req wire.ContextRequest
		_ = json.Unmarshal(data, &req)
		if req.Op == wire.ContextInterrupt {
			interrupts <- req
		} else {
			runs <- req
			<-release
		}
		out, _ := json.Marshal(wire.ContextReply{V: wire.Version, Result: &wire.Result{V: wire.Version, Scope: "local", Status: wire.StatusOK}})
		return out
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	t.Cleanup(func() { close(release) })
	ctx, cancel := context.WithCancel(t.Context())
	before := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := jb.f.runInContext(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "run_in_context",
			Arguments: map[string]any{"context_id": "c1", "code": "x", "timeout_seconds": 5.0}}}, "local")
		done <- err
	}()
	var run wire.ContextRequest
	select {
	case run = <-runs:
	case err := <-done:
		t.Fatalf("run_in_context ended before it asked the worker: %v", err)
	}
	if run.Call == "" || run.Deadline.Before(before.Add(5*time.Second)) || run.Deadline.After(time.Now().Add(5*time.Second+contextAnswerSlack)) {
		t.Fatalf("the run request: call %q, deadline %s (sent after %s); want a call id and the deadline the caller waits until",
			run.Call, run.Deadline, before)
	}
	cancel()
	<-done
	if in := <-interrupts; in.Call != run.Call || in.ID != "c1" {
		t.Fatalf("the interrupt: %+v; want it to name call %q", in, run.Call)
	}
}
