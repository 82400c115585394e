package frontend

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/oklog/ulid/v2"
)

// These tests run the job tools on a Frontend with a real in-process
// JetStream and a bbolt state store, through mcp-go's in-process client
// (stdio scope "local"), with no worker: what they check happens before a
// worker takes a job, or is written to the broker as a worker would.

type jobBundle struct {
	f *Frontend
	e *broker.Embedded
	b *broker.Broker
	c *client.Client
	// notes receives the client's notifications.
	notes chan mcp.JSONRPCNotification
}

func setupJobs(t *testing.T, cfg Config) jobBundle {
	t.Helper()
	e := brokertest.StartNATS(t)
	b := brokertest.Open(t, e, broker.Config{})
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f, err := New(cfg, b, st)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewInProcessClient(f.MCPServer(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	notes := make(chan mcp.JSONRPCNotification, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) { notes <- n })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return jobBundle{f: f, e: e, b: b, c: c, notes: notes}
}

// A record of job id in scope, with its deadline at deadline.
func putRecord(t *testing.T, b *broker.Broker, scope string, deadline time.Time) string {
	t.Helper()
	job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Scope: scope,
		EnqueuedAt: deadline.Add(-time.Minute), Deadline: deadline, TimeoutMS: 1000}
	if err := b.PutJobRecord(t.Context(), broker.RecordOf(job)); err != nil {
		t.Fatal(err)
	}
	return job.ID
}

// get_job_result tells a job's result, a job still running, an expired job
// and an unknown one apart, and says of another session's job exactly what
// it says of an unknown one.
func TestGetJobResultStates(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	ctx := t.Context()
	get := func(id string) (*mcp.CallToolResult, ExecResult) {
		return callTool[ExecResult](t, jb.c, "get_job_result", map[string]any{"job_id": id})
	}

	running := putRecord(t, jb.b, "local", time.Now().Add(time.Minute))
	res, er := get(running)
	if res.IsError || er.Status != "running" || er.JobID != running || !strings.Contains(er.Message, "not finished") {
		t.Errorf("running job: isError=%v %+v", res.IsError, er)
	}

	expired := putRecord(t, jb.b, "local", time.Now().Add(-time.Hour))
	res, er = get(expired)
	if !res.IsError || er.Status != "expired" || er.JobID != expired || !strings.Contains(er.Message, "will not run") {
		t.Errorf("expired job: isError=%v %+v", res.IsError, er)
	}

	done := putRecord(t, jb.b, "local", time.Now().Add(time.Minute))
	if _, err := jb.b.PutResult(ctx, &wire.Result{JobID: done, Scope: "local", Status: wire.StatusOK, Stdout: "hi\n"}); err != nil {
		t.Fatal(err)
	}
	res, er = get(done)
	if res.IsError || er.Status != "ok" || er.Stdout != "hi\n" {
		t.Errorf("finished job: isError=%v %+v", res.IsError, er)
	}

	// Unknown, and another session's in each state: one answer.
	unknown := ulid.Make().String()
	otherRunning := putRecord(t, jb.b, "other", time.Now().Add(time.Minute))
	otherExpired := putRecord(t, jb.b, "other", time.Now().Add(-time.Hour))
	otherDone := putRecord(t, jb.b, "other", time.Now().Add(time.Minute))
	if _, err := jb.b.PutResult(ctx, &wire.Result{JobID: otherDone, Scope: "other", Status: wire.StatusOK}); err != nil {
		t.Fatal(err)
	}
	res, want := get(unknown)
	if !res.IsError || want.Status != "rejected" || !strings.Contains(want.Message, "no job "+unknown) {
		t.Fatalf("unknown job: isError=%v %+v", res.IsError, want)
	}
	wantText := strings.ReplaceAll(textOf(res), unknown, "ID")
	for _, id := range []string{otherRunning, otherExpired, otherDone} {
		res, er := get(id)
		er.Message = strings.ReplaceAll(er.Message, id, unknown)
		if !res.IsError || er != want || strings.ReplaceAll(textOf(res), id, "ID") != wantText {
			t.Errorf("another session's job %s: isError=%v %+v, want %+v", id, res.IsError, er, want)
		}
	}
}

// The first progress notification of execute_code carries the job id, so a
// client whose connection drops before the result can fetch it; asked for
// while the job waits for a worker, get_job_result says running.
func TestExecuteAnnouncesJobID(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	// A live worker's presence, so that the job is queued; nothing consumes
	// it, so it waits, as a job whose caller lost its connection would.
	jb.liveWorker(t)
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	wg.Go(func() {
		req := mcp.CallToolRequest{}
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": "print(1)"}
		req.Params.Meta = &mcp.Meta{ProgressToken: "call-1"}
		_, _ = jb.c.CallTool(ctx, req)
	})
	var n mcp.JSONRPCNotification
	select {
	case n = <-jb.notes:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
	cancel() // the connection "drops"
	if n.Method != "notifications/progress" || n.Params.AdditionalFields["progressToken"] != "call-1" {
		t.Fatalf("first notification: %s %v", n.Method, n.Params.AdditionalFields)
	}
	msg, _ := n.Params.AdditionalFields["message"].(string)
	id := regexp.MustCompile(`job ([0-9A-Z]{26})`).FindStringSubmatch(msg)
	if id == nil {
		t.Fatalf("first progress notification names no job: %q", msg)
	}
	res, er := callTool[ExecResult](t, jb.c, "get_job_result", map[string]any{"job_id": id[1]})
	if res.IsError || er.Status != "running" || er.JobID != id[1] {
		t.Errorf("get_job_result of the announced job: isError=%v %+v", res.IsError, er)
	}
}

// A job's publishing is retried until its deadline, but never past the
// stream's duplicate window from the first attempt, so that every copy
// published is one the stream recognises as a repeat.
func TestPublishCutoff(t *testing.T) {
	t.Parallel()
	now := time.Now()
	short := &wire.Job{EnqueuedAt: now, Deadline: now.Add(30 * time.Second)}
	if got := publishCutoff(short); !got.Equal(short.Deadline) {
		t.Errorf("a 30 s job: cutoff %v after enqueue, want its deadline", got.Sub(now))
	}
	long := &wire.Job{EnqueuedAt: now, Deadline: now.Add(10 * time.Minute)}
	if got := publishCutoff(long); got.Add(publishAttempt).After(now.Add(broker.DuplicateWindow)) || !got.Before(long.Deadline) {
		t.Errorf("a 10 min job: cutoff %v after enqueue, want an attempt's length inside the %v window", got.Sub(now), broker.DuplicateWindow)
	}
}

// liveWorker writes a live worker's presence record, so that dispatch
// sends jobs (which nothing consumes).
func (jb jobBundle) liveWorker(t *testing.T) {
	t.Helper()
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: jb.f.cfg.Pool})
	if err := jb.f.store.Touch(t.Context(), jb.f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// A job that cannot be queued before its deadline (NATS is down
// throughout) is known not to run: the call says so, and get_job_result
// says expired at once, with nothing left to wait for.
func TestJobNotQueuedBeforeDeadline(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{QueueWait: time.Millisecond})
	jb.liveWorker(t)
	jb.e.Shutdown()
	for jb.b.Conn().IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	// 0.01 s: the deadline passes before the first retry.
	for _, timeout := range []float64{0.3, 0.01} {
		res, er := callTool[ExecResult](t, jb.c, "execute_code", map[string]any{"code": "print(1)", "timeout_seconds": timeout})
		if !res.IsError || er.JobID == "" || !strings.Contains(er.Message, "did not run and will not") {
			t.Fatalf("timeout %g: call: isError=%v %+v", timeout, res.IsError, er)
		}
		res, got := callTool[ExecResult](t, jb.c, "get_job_result", map[string]any{"job_id": er.JobID})
		if !res.IsError || got.Status != "expired" || got.JobID != er.JobID || !strings.Contains(got.Message, "did not run") {
			t.Errorf("timeout %g: get_job_result: isError=%v %+v", timeout, res.IsError, got)
		}
	}
}
