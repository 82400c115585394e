package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/oklog/ulid/v2"
)

// MCP tasks and cancellation, end to end: through mcp-go's client against
// `codexec dev` on stdio, and against a cluster of two frontends on HTTP,
// each a process of its own, with real workers running real Python.

// taskRequestID numbers the requests these tests send outside the
// client's own numbering.
var taskRequestID atomic.Int64

// callAsTask calls tool as a task (a tools/call with a task parameter,
// sent through the client's transport: mcp-go's CallTool returns only a
// tool result) and returns the task the server created.
func callAsTask(t testing.TB, c *client.Client, tool string, args map[string]any) mcp.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := c.GetTransport().SendRequest(ctx, transport.JSONRPCRequest{
		JSONRPC: mcp.JSONRPC_VERSION, ID: mcp.NewRequestId("task-" + strconv.FormatInt(taskRequestID.Add(1), 10)),
		Method: string(mcp.MethodToolsCall),
		Params: map[string]any{"name": tool, "arguments": args, "task": map[string]any{}},
	})
	if err != nil {
		t.Fatalf("%s as a task: %v", tool, err)
	}
	if resp.Error != nil {
		t.Fatalf("%s as a task: error %d %s", tool, resp.Error.Code, resp.Error.Message)
	}
	var created mcp.CreateTaskResult
	if err := json.Unmarshal(resp.Result, &created); err != nil || created.Task.TaskId == "" {
		t.Fatalf("%s as a task: no task in %s (%v)", tool, resp.Result, err)
	}
	return created.Task
}

func getTask(c *client.Client, id string) (*mcp.GetTaskResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: id}})
}

func taskResult(c *client.Client, id string) (*mcp.TaskResultResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return c.TaskResult(ctx, mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: id}})
}

func cancelTask(c *client.Client, id string) (*mcp.CancelTaskResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: id}})
}

// taskExec is a task's result as an ExecResult.
func taskExec(t testing.TB, r *mcp.TaskResultResult) frontend.ExecResult {
	t.Helper()
	var er frontend.ExecResult
	if err := e2e.Decode(&mcp.CallToolResult{StructuredContent: r.StructuredContent}, &er); err != nil {
		t.Fatal(err)
	}
	return er
}

// awaitTask polls the task until it is terminal.
func awaitTask(t testing.TB, c *client.Client, id string) mcp.Task {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		got, err := getTask(c, id)
		if err != nil {
			t.Fatalf("tasks/get %s: %v", id, err)
		}
		if got.Status.IsTerminal() {
			return got.Task
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("task %s did not end", id)
	return mcp.Task{}
}

// markedCode is Python that says it started, then starts a child holding
// marker in its command line and sleeps: a job whose processes can be found
// in /proc, whose output is there once they are.
func markedCode(marker string) string {
	return fmt.Sprintf("import subprocess, sys, time\n"+
		"print('started', flush=True)\n"+
		"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', %q])\ntime.sleep(600)\n", marker)
}

// procsWith returns the pids of the processes whose command line holds
// marker, in any PID namespace.
func procsWith(t testing.TB, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitProcs waits until the processes holding marker are there (want) or
// all gone (!want), at most within.
func waitProcs(t testing.TB, marker string, want bool, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for (len(procsWith(t, marker)) > 0) != want {
		if time.Now().After(deadline) {
			t.Fatalf("processes holding %s: %v after %s, want present=%v", marker, procsWith(t, marker), within, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newMarker is a string no other process's command line holds.
func newMarker() string { return "codexec-e2e-cancel-" + ulid.Make().String() }

// runOf is the job id of the session's run of filename, from its runs
// history.
func runOf(t testing.TB, c *client.Client, filename string) string {
	t.Helper()
	_, list := callAs[frontend.ListResult](t, c, "list_code_files", nil)
	for _, r := range list.Runs {
		if r.Filename == filename {
			return r.JobID
		}
	}
	t.Fatalf("no run of %s in %+v", filename, list.Runs)
	return ""
}

// awaitJobStatus polls get_job_result until the job is no longer running.
func awaitJobStatus(t testing.TB, c *client.Client, id string) frontend.ExecResult {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, er := call(t, c, "get_job_result", map[string]any{"job_id": id})
		if er.Status != "running" || time.Now().After(deadline) {
			return er
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Tasks over stdio with `codexec dev`: a task's result, its status and
// list; a task cancelled mid-run, whose processes are gone; a blocking
// call cancelled by notifications/cancelled, whose processes are gone too
// and whose job says cancelled.
func TestDevTasks(t *testing.T) {
	t.Parallel()
	c, _ := devStdio(t, t.TempDir())

	t.Run("tools say they take tasks", func(t *testing.T) {
		tools, err := c.ListTools(context.Background(), mcp.ListToolsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		support := map[string]mcp.TaskSupport{}
		for _, tool := range tools.Tools {
			if tool.Execution != nil {
				support[tool.Name] = tool.Execution.TaskSupport
			}
		}
		for _, name := range []string{"execute_code", "execute_code_file", "install_dependencies", "configure_environment"} {
			if support[name] != mcp.TaskSupportOptional {
				t.Errorf("%s: taskSupport %q, want optional", name, support[name])
			}
		}
	})

	t.Run("result", func(t *testing.T) {
		task := callAsTask(t, c, "execute_code", map[string]any{"code": "import time; time.sleep(1); print('from a task')"})
		if task.Status != mcp.TaskStatusWorking {
			t.Errorf("created task: %+v", task)
		}
		res, err := taskResult(c, task.TaskId)
		if err != nil {
			t.Fatal(err)
		}
		er := taskExec(t, res)
		if res.IsError || er.Status != "ok" || er.Stdout != "from a task\n" || er.JobID != task.TaskId {
			t.Fatalf("tasks/result: isError=%v %+v", res.IsError, er)
		}
		if got := awaitTask(t, c, task.TaskId); got.Status != mcp.TaskStatusCompleted {
			t.Errorf("tasks/get after the result: %+v", got)
		}
		list, err := c.ListTasks(context.Background(), mcp.ListTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, lt := range list.Tasks {
			found = found || lt.TaskId == task.TaskId
		}
		if !found {
			t.Errorf("tasks/list does not list %s: %+v", task.TaskId, list.Tasks)
		}
		failed := callAsTask(t, c, "execute_code", map[string]any{"code": "1/0"})
		if got := awaitTask(t, c, failed.TaskId); got.Status != mcp.TaskStatusFailed || !strings.HasPrefix(got.StatusMessage, "error: ") {
			t.Errorf("a task whose code raised: %+v, want failed, its statusMessage saying why", got)
		}
	})

	t.Run("cancel mid-run", func(t *testing.T) {
		marker := newMarker()
		task := callAsTask(t, c, "execute_code", map[string]any{"code": markedCode(marker), "timeout_seconds": 300})
		waitProcs(t, marker, true, 2*time.Minute)
		cancelled, err := cancelTask(c, task.TaskId)
		if err != nil || cancelled.Status != mcp.TaskStatusCancelled {
			t.Fatalf("tasks/cancel: %+v, %v", cancelled, err)
		}
		res, err := taskResult(c, task.TaskId)
		if err != nil {
			t.Fatal(err)
		}
		if er := taskExec(t, res); er.Status != "cancelled" || er.WorkerID == "" {
			t.Errorf("tasks/result of the cancelled task: %+v", er)
		}
		waitProcs(t, marker, false, 30*time.Second)
		if got := awaitTask(t, c, task.TaskId); got.Status != mcp.TaskStatusCancelled {
			t.Errorf("tasks/get: %+v, want cancelled", got)
		}
		if _, err := cancelTask(c, task.TaskId); !errors.Is(err, mcp.ErrInvalidParams) {
			t.Errorf("cancelling a cancelled task again: %v; want invalid params (-32602)", err)
		}
		done := callAsTask(t, c, "execute_code", map[string]any{"code": "print('done')"})
		awaitTask(t, c, done.TaskId)
		if _, err := cancelTask(c, done.TaskId); !errors.Is(err, mcp.ErrInvalidParams) {
			t.Errorf("cancelling a completed task: %v; want invalid params (-32602)", err)
		}
		if res, err := taskResult(c, done.TaskId); err != nil || taskExec(t, res).Stdout != "done\n" {
			t.Errorf("a completed task lost its result to a cancel: %v", err)
		}
	})

	t.Run("unknown task", func(t *testing.T) {
		if _, err := getTask(c, ulid.Make().String()); err == nil || !strings.Contains(err.Error(), "unknown task") {
			t.Errorf("tasks/get of an unknown task: %v", err)
		}
	})

	t.Run("blocking call cancelled", func(t *testing.T) {
		marker := newMarker()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req := mcp.CallToolRequest{}
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": markedCode(marker), "timeout_seconds": 300, "filename": marker}
		returned := make(chan error, 1)
		go func() {
			_, err := c.CallTool(ctx, req)
			returned <- err
		}()
		waitProcs(t, marker, true, 2*time.Minute)
		cancel() // mcp-go's client sends notifications/cancelled
		<-returned
		waitProcs(t, marker, false, 30*time.Second)
		jobID := runOf(t, c, marker+".py")
		if er := awaitJobStatus(t, c, jobID); er.Status != "cancelled" {
			t.Errorf("get_job_result of the cancelled call's job: %+v", er)
		}
	})
}

// Tasks in a cluster of two frontends: a task created on A is polled and
// its result fetched on B, also after its client went away and came back
// in the same session; another session asks in vain; a task cancelled
// through B stops on its worker; a blocking call whose HTTP request is
// closed (no cancel notification) stops its job.
func TestClusterTasks(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	urlA, urlB := cl.mcpURL, cl.addFrontend(t)
	a := httpClient(t, urlA)
	session := a.GetSessionId()
	ctx := context.Background()
	resume := func(t *testing.T, url string) *client.Client {
		c, err := e2e.ResumeHTTP(ctx, url, session)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	t.Run("polled and fetched on another frontend after a reconnect", func(t *testing.T) {
		// A client of its own, closed once the task is created: it comes
		// back, in the same session, on the other frontend.
		x, err := e2e.ConnectHTTP(ctx, urlA, mcp.LATEST_LEGACY_PROTOCOL_VERSION, clientInfo)
		if err != nil {
			t.Fatal(err)
		}
		xSession := x.GetSessionId()
		task := callAsTask(t, x, "execute_code", map[string]any{"code": "import time; time.sleep(2); print('on A')"})
		_ = x.Close()
		b, err := e2e.ResumeHTTP(ctx, urlB, xSession)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		if got, err := getTask(b, task.TaskId); err != nil || got.Status.IsTerminal() && got.Status != mcp.TaskStatusCompleted {
			t.Fatalf("tasks/get on B: %+v, %v", got, err)
		}
		if got := awaitTask(t, b, task.TaskId); got.Status != mcp.TaskStatusCompleted {
			t.Errorf("task on B: %+v", got)
		}
		res, err := taskResult(b, task.TaskId)
		if err != nil {
			t.Fatal(err)
		}
		if er := taskExec(t, res); er.Stdout != "on A\n" || er.Status != "ok" {
			t.Errorf("tasks/result on B: %+v", er)
		}
	})

	t.Run("another session is refused", func(t *testing.T) {
		task := callAsTask(t, a, "execute_code", map[string]any{"code": "print('secret')"})
		awaitTask(t, a, task.TaskId)
		other := httpClient(t, urlB)
		if _, err := getTask(other, task.TaskId); err == nil || !strings.Contains(err.Error(), "unknown task") {
			t.Errorf("tasks/get from another session: %v", err)
		}
		if res, err := taskResult(other, task.TaskId); err == nil {
			t.Errorf("tasks/result from another session: %+v", res)
		}
		if _, err := cancelTask(other, task.TaskId); err == nil {
			t.Error("tasks/cancel from another session succeeded")
		}
		list, err := other.ListTasks(ctx, mcp.ListTasksRequest{})
		if err != nil || len(list.Tasks) != 0 {
			t.Errorf("tasks/list of another session: %+v, %v", list, err)
		}
	})

	t.Run("cancelled through another frontend", func(t *testing.T) {
		marker := newMarker()
		task := callAsTask(t, a, "execute_code", map[string]any{"code": markedCode(marker), "timeout_seconds": 300})
		waitProcs(t, marker, true, 2*time.Minute)
		b := resume(t, urlB)
		if got, err := cancelTask(b, task.TaskId); err != nil || got.Status != mcp.TaskStatusCancelled {
			t.Fatalf("tasks/cancel on B: %+v, %v", got, err)
		}
		waitProcs(t, marker, false, 30*time.Second)
		res, err := taskResult(a, task.TaskId)
		if err != nil {
			t.Fatal(err)
		}
		if er := taskExec(t, res); er.Status != "cancelled" {
			t.Errorf("tasks/result on A of the task cancelled on B: %+v", er)
		}
	})

	t.Run("closed HTTP request", func(t *testing.T) {
		marker := newMarker()
		body, _ := json.Marshal(map[string]any{
			"jsonrpc": "2.0", "id": 1, "method": "tools/call",
			"params": map[string]any{"name": "execute_code", "arguments": map[string]any{"code": markedCode(marker), "timeout_seconds": 300}},
		})
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, urlA, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitProcs(t, marker, true, 2*time.Minute)
		cancel() // the connection closes; no notification is sent
		<-done
		waitProcs(t, marker, false, 30*time.Second)
	})
}
