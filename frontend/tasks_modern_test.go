package frontend

import (
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// A client of protocol revision 2026-07-28 (no sessions; its scope is its
// principal's, here its Authorization header's) calls a tool as a task,
// reads and cancels it; another principal cannot see it.
func TestTasksSessionless(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	url := serveHTTP(t, jb.f)
	connect := func(token string) *client.Client { return httpSessionAs(t, url, token, mcp.LATEST_PROTOCOL_VERSION) }
	a, b := connect("alice"), connect("bob")
	task := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(1)"}))
	ctx := t.Context()
	if got, err := a.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}}); err != nil || got.Status != mcp.TaskStatusWorking {
		t.Fatalf("tasks/get: %+v %v", got, err)
	}
	if _, err := b.GetTask(ctx, mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}}); err == nil {
		t.Fatal("another principal read the task")
	}
	got, err := a.CancelTask(ctx, mcp.CancelTaskRequest{Params: mcp.CancelTaskParams{TaskId: task.TaskId}})
	if err != nil || got.Status != mcp.TaskStatusCancelled {
		t.Fatalf("tasks/cancel: %+v %v", got, err)
	}
}
