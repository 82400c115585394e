package frontend

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// These tests drive the task router over HTTP with no worker: the jobs of
// tasks wait in the queue, so a task stays working until it is cancelled.

func httpSession(t *testing.T, url string) *client.Client {
	t.Helper()
	return httpSessionAs(t, url, "", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
}

// httpSessionAs is an initialised Streamable HTTP client of url speaking
// version, with token as its bearer credential when not "".
func httpSessionAs(t *testing.T, url, token, version string) *client.Client {
	t.Helper()
	var opts []transport.StreamableHTTPCOption
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return c
}

// taskCall sends a task-augmented tools/call and returns the response.
// A client of revision 2026-07-28 names the revision, itself and its
// capabilities in the request's _meta and the method and tool in headers,
// as its own methods do; a raw request lacking them is refused.
func taskCall(t *testing.T, c *client.Client, tool string, args map[string]any) *transport.JSONRPCResponse {
	t.Helper()
	req := transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId("t"), Method: string(mcp.MethodToolsCall),
		Params: map[string]any{"name": tool, "arguments": args, "task": map[string]any{"ttl": 60000}},
	}
	if mcp.IsModernProtocol(c.ProtocolVersion()) {
		req.Params.(map[string]any)["_meta"] = modernMeta()
		req.Header = http.Header{mcp.HeaderMethod: {req.Method}, mcp.HeaderName: {tool}}
	}
	resp, err := c.GetTransport().SendRequest(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func createdTask(t *testing.T, resp *transport.JSONRPCResponse) mcp.Task {
	t.Helper()
	if resp.Error != nil {
		t.Fatalf("task not created: %s", resp.Error.Message)
	}
	var created mcp.CreateTaskResult
	if err := json.Unmarshal(resp.Result, &created); err != nil {
		t.Fatal(err)
	}
	return created.Task
}

// A task is its session's: another session is told it does not exist, and
// cannot list, read or cancel it. Cancelled, its job carries the cancel
// mark (the job is the task), and its result says cancelled.
func TestTasksBelongToTheirSession(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	a, b := httpSession(t, url), httpSession(t, url)

	task := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(1)"}))
	if task.Status != mcp.TaskStatusWorking || task.TTL == nil || *task.TTL != 60000 {
		t.Fatalf("created: %+v", task)
	}
	ctx := t.Context()
	if got, err := a.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}}); err != nil || got.Status != mcp.TaskStatusWorking {
		t.Fatalf("tasks/get: %+v %v", got, err)
	}
	if _, err := b.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}}); err == nil || !strings.Contains(err.Error(), "unknown task") {
		t.Fatalf("another session's tasks/get: %v", err)
	}
	if _, err := b.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: task.TaskId}}); err == nil {
		t.Fatal("another session cancelled the task")
	}
	if marked, _ := jb.b.JobCancelled(ctx, task.TaskId); marked {
		t.Fatal("another session's cancel marked the job")
	}
	if list, err := b.ListTasks(ctx, mcp.ListTasksRequest{}); err != nil || len(list.Tasks) != 0 {
		t.Fatalf("another session's tasks/list: %+v %v", list, err)
	}
	if list, err := a.ListTasks(ctx, mcp.ListTasksRequest{}); err != nil || len(list.Tasks) != 1 || list.Tasks[0].TaskId != task.TaskId {
		t.Fatalf("tasks/list: %+v %v", list, err)
	}
	cancelled, err := a.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: task.TaskId}})
	if err != nil || cancelled.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel: %+v %v", cancelled, err)
	}
	if marked, err := jb.b.JobCancelled(ctx, task.TaskId); !marked || err != nil {
		t.Fatalf("the task's job has no cancel mark: %v %v", marked, err)
	}
	res, err := a.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: task.TaskId}})
	if err != nil {
		t.Fatal(err)
	}
	var er ExecResult
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &er); err != nil || er.Status != "cancelled" || er.JobID != task.TaskId || !res.IsError {
		t.Fatalf("tasks/result of the cancelled task: %+v %v", er, err)
	}
}

// A frontend holds a bounded number of running tasks and of their
// arguments' bytes; past the bound a new task is refused, not queued in
// memory.
func TestRunningTasksBounded(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{MaxCodeBytes: 64 << 10, RequestBudget: 1 << 20, MaxRequestBytes: 1 << 20})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	a := httpSession(t, url)
	code := "x = '" + strings.Repeat("a", 60<<10) + "'"
	var refused *transport.JSONRPCResponse
	for i := range 40 {
		resp := taskCall(t, a, "execute_code", map[string]any{"code": code})
		if resp.Error != nil {
			refused = resp
			if i < 15 {
				t.Fatalf("refused after %d tasks of 60 KiB within a 1 MiB budget: %s", i, resp.Error.Message)
			}
			break
		}
	}
	if refused == nil || !strings.Contains(refused.Error.Message, "too many tasks") {
		t.Fatalf("40 tasks of 60 KiB within a 1 MiB budget were all taken: %+v", refused)
	}
}

// serveHTTP serves f's HTTP handler until the test ends, and returns its
// MCP URL.
func serveHTTP(t *testing.T, f *Frontend) string {
	t.Helper()
	h, mcpHTTP := f.HTTPHandler()
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		f.Abort()
		_ = mcpHTTP.Shutdown(context.Background())
		srv.CloseClientConnections()
		srv.Close()
		f.tasks.Wait()
	})
	return srv.URL + "/mcp"
}

// awaitTaskOver polls tasks/get until task id is in a terminal status.
func awaitTaskOver(t *testing.T, c *client.Client, id string) mcp.Task {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.GetTask(t.Context(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.IsTerminal() || time.Now().After(deadline) {
			return got.Task
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A failed task says why in its statusMessage, in tasks/get and
// tasks/list; a task in a terminal status (failed, cancelled) cannot be
// cancelled: the revision says -32602, and its status stays as it was.
func TestTaskFailedSaysWhyAndTerminalTasksRefuseCancel(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	c := httpSession(t, url)

	failed := createdTask(t, taskCall(t, c, "execute_code_file", map[string]any{"file_path": "never_made.py"}))
	got := awaitTaskOver(t, c, failed.TaskId)
	if got.Status != mcp.TaskStatusFailed || !strings.HasPrefix(got.StatusMessage, "rejected: ") || !strings.Contains(got.StatusMessage, "never_made") {
		t.Fatalf("failed task: status %s, statusMessage %q", got.Status, got.StatusMessage)
	}
	list, err := c.ListTasks(t.Context(), mcp.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 || list.Tasks[0].StatusMessage != got.StatusMessage {
		t.Fatalf("tasks/list: %+v %v", list, err)
	}

	working := createdTask(t, taskCall(t, c, "execute_code", map[string]any{"code": "print(1)"}))
	if cancelled, err := c.CancelTask(t.Context(), mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: working.TaskId}}); err != nil || cancelled.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel of a working task: %+v %v", cancelled, err)
	}
	for _, id := range []string{failed.TaskId, working.TaskId} {
		resp, err := c.GetTransport().SendRequest(t.Context(), transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId("c"), Method: string(mcp.MethodTasksCancel),
			Params: map[string]any{"taskId": id},
		})
		if err != nil || resp.Error == nil || resp.Error.Code != mcp.INVALID_PARAMS || !strings.Contains(resp.Error.Message, "terminal") {
			t.Errorf("tasks/cancel of terminal task %s: %+v %v", id, resp, err)
		}
	}
	if got := awaitTaskOver(t, c, failed.TaskId); got.Status != mcp.TaskStatusFailed {
		t.Errorf("the failed task after a cancel: %+v", got)
	}
}

// A task's lastUpdatedAt is when its status last changed: an ended task
// keeps the time it ended, whenever and however often it is read. It was
// the time of the read, so a client that polls, or lists, saw a finished
// task change at every look (and could not tell when it had ended).
func TestTaskLastUpdatedIsWhenItEnded(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	c := httpSession(t, url)

	before := time.Now()
	failed := createdTask(t, taskCall(t, c, "execute_code_file", map[string]any{"file_path": "never_made.py"}))
	first := awaitTaskOver(t, c, failed.TaskId)
	ended := time.Now()
	at, err := time.Parse(time.RFC3339Nano, first.LastUpdatedAt)
	if err != nil || at.Before(before.Add(-time.Second)) || at.After(ended) {
		t.Fatalf("lastUpdatedAt %q (%v) is not between the call (%v) and its end (%v)", first.LastUpdatedAt, err, before, ended)
	}
	time.Sleep(50 * time.Millisecond)
	if again := awaitTaskOver(t, c, failed.TaskId); again.LastUpdatedAt != first.LastUpdatedAt {
		t.Errorf("tasks/get: lastUpdatedAt %q, then %q with nothing changed", first.LastUpdatedAt, again.LastUpdatedAt)
	}
	list, err := c.ListTasks(t.Context(), mcp.ListTasksRequest{})
	if err != nil || len(list.Tasks) != 1 {
		t.Fatalf("tasks/list: %+v %v", list, err)
	}
	if list.Tasks[0].LastUpdatedAt != first.LastUpdatedAt {
		t.Errorf("tasks/list: lastUpdatedAt %q, tasks/get said %q", list.Tasks[0].LastUpdatedAt, first.LastUpdatedAt)
	}
}

// A client's ttl is capped by the results' retention, however large: one
// near the largest int64 overflowed when made a duration, and the task
// was created with a negative ttl (-1), which no client can make sense of.
func TestTaskHugeTTLIsTheRetention(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	url := serveHTTP(t, jb.f)
	c := httpSession(t, url)
	retention := jb.f.broker.Retention().Milliseconds()
	for _, ttl := range []int64{math.MaxInt64, math.MaxInt64 / 1000, retention + 1, retention, 1500} {
		resp, err := c.GetTransport().SendRequest(t.Context(), transport.JSONRPCRequest{
			JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId("t"), Method: string(mcp.MethodToolsCall),
			Params: map[string]any{"name": "execute_code", "arguments": map[string]any{"code": "print(1)"}, "task": map[string]any{"ttl": ttl}},
		})
		if err != nil {
			t.Fatal(err)
		}
		task := createdTask(t, resp)
		want := min(ttl, retention)
		if task.TTL == nil || *task.TTL != want {
			t.Errorf("ttl %d: the task's ttl is %s, want %d", ttl, ttlString(task.TTL), want)
		}
		if got, err := c.GetTask(t.Context(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}}); err != nil {
			t.Fatal(err)
		} else if got.TTL == nil || *got.TTL != want {
			t.Errorf("ttl %d: tasks/get says ttl %s, want %d", ttl, ttlString(got.TTL), want)
		}
	}
}

func ttlString(ttl *int64) string {
	if ttl == nil {
		return "absent"
	}
	return strconv.FormatInt(*ttl, 10)
}

// A task cancelled while its job is being stopped says cancelled, last
// updated when it was cancelled: it said its creation time, so a client
// saw the task's lastUpdatedAt go back after the cancel's answer.
func TestCancelledTaskLastUpdatedIsTheCancel(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	c := httpSession(t, url)

	task := createdTask(t, taskCall(t, c, "execute_code", map[string]any{"code": "print(1)"}))
	time.Sleep(50 * time.Millisecond)
	cancelled, err := c.CancelTask(t.Context(), mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: task.TaskId}})
	if err != nil || cancelled.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel: %+v %v", cancelled, err)
	}
	got, err := c.GetTask(t.Context(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}})
	if err != nil {
		t.Fatal(err)
	}
	created, _ := time.Parse(time.RFC3339Nano, task.CreatedAt)
	updated, err := time.Parse(time.RFC3339Nano, got.LastUpdatedAt)
	if err != nil || got.Status != mcp.TaskStatusCancelled || !updated.After(created.Add(40*time.Millisecond)) {
		t.Errorf("tasks/get after the cancel: status %s, lastUpdatedAt %s (created %s, cancel answered %s)",
			got.Status, got.LastUpdatedAt, task.CreatedAt, cancelled.LastUpdatedAt)
	}
}

// tasks/list refuses a cursor it cannot have returned with -32602, as the
// protocol asks: any string used to be taken as a position, so "bogus"
// listed nothing and "0" listed everything, silently.
func TestTasksListRefusesBogusCursor(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	a := httpSession(t, url)
	first := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(1)"}))
	second := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(2)"}))
	ctx := t.Context()
	list := func(cursor string) (*mcp.ListTasksResult, error) {
		req := mcp.ListTasksRequest{}
		req.Params.Cursor = mcp.Cursor(cursor)
		return a.ListTasks(ctx, req)
	}
	for _, cursor := range []string{"bogus", "0", "\x00", strings.ToLower(first.TaskId), first.TaskId + "x", strings.Repeat("Z", 26)} {
		if got, err := list(cursor); err == nil {
			t.Errorf("cursor %q: answered %+v, want an error", cursor, got)
		} else if !strings.Contains(err.Error(), "cursor") {
			t.Errorf("cursor %q: %v", cursor, err)
		}
	}
	// The cursor of a real page still pages.
	got, err := list(first.TaskId)
	if err != nil || len(got.Tasks) != 1 || got.Tasks[0].TaskId != second.TaskId {
		t.Fatalf("after the first task: %+v %v", got, err)
	}
}

// A task whose frontend went away before its job was queued (killed, or
// stopped while the job waited for its turn) has neither an outcome nor a
// job result, ever: it read "working" until it expired a day later, and
// tasks/result waited as long. Past its deadline it reads failed, saying
// why, and tasks/result answers at once; a new task's record has a
// deadline.
func TestOrphanedTaskFailsAtItsDeadline(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	a := httpSession(t, url)
	ctx := t.Context()
	scope := scopeOf(ctx, false, a.GetSessionId())

	live := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(1)"}))
	rec, err := jb.b.GetTask(ctx, scope, live.TaskId)
	if err != nil {
		t.Fatal(err)
	}
	if min := jb.f.cfg.QueueWait + 2*jb.f.cfg.MaxTimeout; rec.Deadline.Sub(rec.CreatedAt) < min {
		t.Fatalf("a new task's deadline is %v after its creation, want at least %v", rec.Deadline.Sub(rec.CreatedAt), min)
	}

	// What a frontend killed right after answering leaves: the record.
	created := time.Now().Add(-2 * time.Hour).UTC()
	orphan := &broker.TaskRecord{TaskID: ulid.Make().String(), Scope: scope, Tool: "execute_code",
		CreatedAt: created, TTLMS: 86400000, Deadline: created.Add(time.Hour)}
	if err := jb.b.PutTask(ctx, orphan); err != nil {
		t.Fatal(err)
	}
	got, err := a.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: orphan.TaskID}})
	if err != nil || got.Status != mcp.TaskStatusFailed || !strings.Contains(got.StatusMessage, "went away") {
		t.Fatalf("tasks/get of the orphaned task: %+v %v", got, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := a.TaskResult(wctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: orphan.TaskID}}); err == nil || !strings.Contains(err.Error(), "went away") {
		t.Fatalf("tasks/result of the orphaned task: %v", err)
	}
	list, err := a.ListTasks(ctx, mcp.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range list.Tasks {
		if task.TaskId == orphan.TaskID && task.Status != mcp.TaskStatusFailed {
			t.Fatalf("tasks/list shows the orphaned task %s", task.Status)
		}
	}
}

// A task marked cancelled stays cancelled when its job's result says it
// finished all the same (its worker was stopped when the cancel came, and
// the job ended on resuming before the mark reached it): tasks/cancel
// answered cancelled, and a terminal status does not change. It used to
// read completed once the result was stored, in tasks/get and in the
// outcome its frontend stored, after the cancel and tasks/get had said
// cancelled.
func TestCancelledTaskStaysCancelledWhenItsJobFinished(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	a := httpSession(t, url)
	ctx := t.Context()
	scope := scopeOf(ctx, false, a.GetSessionId())

	// A task whose frontend is gone (no outcome will be stored): its job's
	// result answers for it.
	now := time.Now().UTC()
	rec := &broker.TaskRecord{TaskID: ulid.Make().String(), Scope: scope, Tool: "execute_code",
		CreatedAt: now, TTLMS: 86400000, Deadline: now.Add(time.Hour)}
	if err := jb.b.PutTask(ctx, rec); err != nil {
		t.Fatal(err)
	}
	cancelled, err := a.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: rec.TaskID}})
	if err != nil || cancelled.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel: %+v %v", cancelled, err)
	}
	if _, err := jb.b.PutResult(ctx, &wire.Result{V: wire.Version, JobID: rec.TaskID, Scope: scope, Status: wire.StatusOK,
		Stdout: "done\n", WorkerID: "w", StartedAt: now, FinishedAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	got, err := a.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: rec.TaskID}})
	if err != nil || got.Status != mcp.TaskStatusCancelled || !strings.Contains(got.StatusMessage, "had finished") {
		t.Fatalf("tasks/get of the cancelled task whose job finished: %+v %v", got, err)
	}
	res, err := a.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: rec.TaskID}})
	if err != nil || res.IsError {
		t.Fatalf("tasks/result: %+v %v, want the job's result", res, err)
	}

	// The outcome a live frontend stores for it says cancelled too.
	tr := mcp.NewToolResultText("done")
	tr.StructuredContent = map[string]any{"status": "ok"}
	var o taskOutcome
	if err := json.Unmarshal(jb.f.outcomeOf(tr, nil, true), &o); err != nil {
		t.Fatal(err)
	}
	if o.Status != mcp.TaskStatusCancelled || len(o.Result) == 0 {
		t.Errorf("outcome of a cancelled task whose tool finished: %s %q (result kept: %v)", o.Status, o.Message, len(o.Result) > 0)
	}
}
