package frontend

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// A task's tool runs after its request has ended, in a context of its own
// (runTask); the caller's credentials must come with it. Without them a
// task was nobody's: a tenant at its quota of jobs ran more as tasks, and
// their jobs carried no tenant or principal (audit, revocation, fair
// share). Here acme's one job at once is taken by a blocking call, and a
// task of acme's must be refused by the quota as that call would be.
func TestTaskCountsAgainstItsTenantsQuota(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "jobs=1")
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	fx[0].pending(t, alice)
	task := createdTask(t, taskCall(t, alice, "execute_code", map[string]any{"code": "print(2)"}))
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := alice.GetTask(t.Context(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != mcp.TaskStatusWorking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acme's task is still %s with acme's one job at once taken: it was not counted against acme's quota", got.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := alice.TaskResult(t.Context(), mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: task.TaskId}})
	if err != nil {
		t.Fatal(err)
	}
	var er ExecResult
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &er); err != nil {
		t.Fatal(err)
	}
	text := textOf(&mcp.CallToolResult{Content: res.Content})
	if m := quotaRe.FindStringSubmatch(text); !res.IsError || er.Status != "rejected" || m == nil || m[1] != quota.Jobs || m[2] != "acme" {
		t.Fatalf("want the task refused by acme's quota of jobs: %s", text)
	}
}

// Revoking a principal cancels the job of a task of hers that is still
// queued, as it does the job of a call that waits (the task's job is the
// task: its id is the task's).
func TestRevokedPrincipalsTaskCancelled(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	ctx := t.Context()
	alice, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	fx.pending(t, alice) // a live worker's advert, so that the task's job is queued
	task := createdTask(t, taskCall(t, alice, "execute_code", map[string]any{"code": "print(2)"}))
	t.Cleanup(func() { // the task's tool waits for its job's result
		if rec, err := fx.b.GetJobRecord(context.Background(), task.TaskId); err == nil {
			_, _ = fx.b.PutResult(context.Background(), &wire.Result{JobID: task.TaskId, Scope: rec.Scope, Status: wire.StatusCancelled})
		}
	})
	watch, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fx.f.WatchRevocations(watch) }()
	t.Cleanup(func() { stop(); <-done })

	marked := make(chan struct{})
	stopWatch, err := fx.b.WatchCancel(task.TaskId, func() { close(marked) })
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch()
	if err := fx.f.store.HSet(ctx, fx.f.cfg.Keys.Revoked(), statestore.RevokedField("acme", "alice"), []byte("now")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-marked:
	case <-time.After(30 * time.Second):
		t.Fatal("the job of alice's task was not cancelled after her revocation")
	}
}

// A task's tool goes through the tool middlewares a call goes through:
// its `workspace` argument is resolved (a handle that names nothing of the
// caller's fails the task, as it fails a call), not ignored, which ran the
// task in the session's own workspace.
func TestTaskInAnUnknownWorkspaceRefused(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	a := httpSession(t, serveHTTP(t, jb.f))
	handle := "wsp_" + strings.Repeat("a", 26)
	task := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(1)", "workspace": handle}))
	t.Cleanup(func() { // were the task run, its tool would wait for its job's result
		if rec, err := jb.b.GetJobRecord(context.Background(), task.TaskId); err == nil {
			_, _ = jb.b.PutResult(context.Background(), &wire.Result{JobID: task.TaskId, Scope: rec.Scope, Status: wire.StatusCancelled})
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := a.GetTask(t.Context(), mcp.GetTaskRequest{Params: mcp.GetTaskParams{TaskId: task.TaskId}})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != mcp.TaskStatusWorking {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a task naming an unknown workspace is still %s: its job was queued", got.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := a.TaskResult(t.Context(), mcp.TaskResultRequest{Params: mcp.TaskResultParams{TaskId: task.TaskId}})
	if err != nil {
		t.Fatal(err)
	}
	if text := textOf(&mcp.CallToolResult{Content: res.Content}); !res.IsError || !strings.Contains(text, "no workspace "+handle) {
		t.Fatalf("want the task refused for its unknown workspace: %s", text)
	}
}

// A task naming a workspace of the caller's runs its job there.
func TestTaskRunsInTheWorkspaceItNames(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	a := httpSession(t, serveHTTP(t, jb.f))
	_, ws := callTool[WorkspaceResult](t, a, "new_workspace", nil)
	want, err := jb.f.resolveHandle(t.Context(), "anonymous", ws.Workspace)
	if err != nil {
		t.Fatal(err)
	}
	task := createdTask(t, taskCall(t, a, "execute_code", map[string]any{"code": "print(1)", "workspace": ws.Workspace}))
	t.Cleanup(func() {
		if rec, err := jb.b.GetJobRecord(context.Background(), task.TaskId); err == nil {
			_, _ = jb.b.PutResult(context.Background(), &wire.Result{JobID: task.TaskId, Scope: rec.Scope, Status: wire.StatusCancelled})
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		rec, err := jb.b.GetJobRecord(t.Context(), task.TaskId)
		if err == nil {
			if rec.Scope != want {
				t.Fatalf("the task's job runs in scope %s, want the workspace's %s", rec.Scope, want)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task's job was never queued: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A task takes a place in its tenant's jobs_per_minute when it is created,
// whatever its call then does: a task is two keys in the results bucket,
// kept for the results' retention, and until 2026-12-04 the task of a
// refused call (an empty code) counted in no quota, so a tenant under
// jobs_per_minute made as many as it could send. The job of a code-running
// task has the task's id and takes no second place.
func TestTaskCountsInJobsPerMinute(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "jobs_per_minute=2")
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	announceWorker(t, fx[0].f)
	runs := createdTask(t, taskCall(t, alice, "execute_code", map[string]any{"code": "print(2)"}))
	t.Cleanup(func() { // the task's tool waits for its job's result
		if rec, err := fx[0].b.GetJobRecord(context.Background(), runs.TaskId); err == nil {
			_, _ = fx[0].b.PutResult(context.Background(), &wire.Result{JobID: runs.TaskId, Scope: rec.Scope, Status: wire.StatusCancelled})
		}
	})
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := fx[0].b.GetJobRecord(t.Context(), runs.TaskId); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first task's job was never queued: its own place in jobs_per_minute refused it")
		}
	}
	createdTask(t, taskCall(t, alice, "execute_code", map[string]any{"code": ""}))
	resp := taskCall(t, alice, "execute_code", map[string]any{"code": ""})
	if resp.Error == nil || !strings.Contains(resp.Error.Message, `quota jobs_per_minute of tenant "acme"`) {
		t.Fatalf("a third task at jobs_per_minute=2: %+v %s, want refused naming the quota", resp.Error, resp.Result)
	}
}
