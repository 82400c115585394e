package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A task is found only under the scope that created it: another scope's
// lookups, lists and outcome reads see nothing. Its outcome is written
// once, and a wait for it ends when it is written.
func TestTaskStoreScoped(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	rec := &broker.TaskRecord{TaskID: ulid.Make().String(), Scope: "scope-a", Tool: "execute_code",
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond), TTLMS: 60000}
	if err := tb.b.PutTask(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got, err := tb.b.GetTask(ctx, "scope-a", rec.TaskID)
	if err != nil || got.Tool != "execute_code" || got.Scope != "scope-a" || !got.CreatedAt.Equal(rec.CreatedAt) {
		t.Fatalf("GetTask = %+v, %v", got, err)
	}
	if _, err := tb.b.GetTask(ctx, "scope-b", rec.TaskID); !errors.Is(err, broker.ErrNoTask) {
		t.Fatalf("another scope's GetTask = %v, want ErrNoTask", err)
	}
	if _, err := tb.b.GetTask(ctx, "scope-a", "../x"); !errors.Is(err, broker.ErrNoTask) {
		t.Fatalf("a malformed id: %v, want ErrNoTask", err)
	}
	list, more, err := tb.b.ListTasks(ctx, "scope-a", "", 10)
	if err != nil || more || len(list) != 1 || list[0].TaskID != rec.TaskID {
		t.Fatalf("ListTasks(scope-a) = %+v more=%v %v", list, more, err)
	}
	if list, _, err := tb.b.ListTasks(ctx, "scope-b", "", 10); err != nil || len(list) != 0 {
		t.Fatalf("ListTasks(scope-b) = %+v %v, want none", list, err)
	}

	waited := make(chan []byte, 1)
	go func() {
		data, err := tb.b.WaitTaskOutcome(ctx, "scope-a", rec.TaskID, nil)
		if err != nil {
			t.Error(err)
		}
		waited <- data
	}()
	if _, err := tb.b.GetTaskOutcome(ctx, "scope-a", rec.TaskID); !errors.Is(err, broker.ErrNoTaskOutcome) {
		t.Fatalf("outcome before any: %v", err)
	}
	if stored, err := tb.b.PutTaskOutcome(ctx, "scope-a", rec.TaskID, []byte(`{"status":"completed"}`)); !stored || err != nil {
		t.Fatalf("PutTaskOutcome = %v, %v", stored, err)
	}
	if stored, err := tb.b.PutTaskOutcome(ctx, "scope-a", rec.TaskID, []byte(`{"status":"failed"}`)); stored || err != nil {
		t.Fatalf("a second outcome: stored=%v %v, want the first kept", stored, err)
	}
	if data := <-waited; string(data) != `{"status":"completed"}` {
		t.Fatalf("WaitTaskOutcome = %s", data)
	}
	if _, err := tb.b.GetTaskOutcome(ctx, "scope-b", rec.TaskID); !errors.Is(err, broker.ErrNoTaskOutcome) {
		t.Fatalf("another scope read the outcome: %v", err)
	}
}

// tasks/list pages through a scope's tasks in id order.
func TestTaskListPages(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	var ids []string
	for range 5 {
		rec := &broker.TaskRecord{TaskID: ulid.Make().String(), Scope: "scope-a", Tool: "execute_code", CreatedAt: time.Now()}
		if err := tb.b.PutTask(ctx, rec); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.TaskID)
	}
	var seen []string
	after := ""
	for {
		page, more, err := tb.b.ListTasks(ctx, "scope-a", after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			seen = append(seen, r.TaskID)
		}
		if !more {
			break
		}
		after = page[len(page)-1].TaskID
	}
	if len(seen) != len(ids) {
		t.Fatalf("listed %v, want %v", seen, ids)
	}
	for i := range ids {
		if seen[i] != ids[i] {
			t.Fatalf("listed %v, want %v", seen, ids)
		}
	}
}

// A cancel mark is seen by a read and by a watch started before it; a
// job that has a result keeps it.
func TestCancelJobMark(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	job := newJob("print(1)")
	fired := make(chan struct{})
	stop, err := tb.b.WatchCancel(job.ID, func() { close(fired) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if marked, err := tb.b.JobCancelled(ctx, job.ID); marked || err != nil {
		t.Fatalf("JobCancelled before the cancel = %v, %v", marked, err)
	}
	if err := tb.b.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.CancelJob(ctx, job.ID); err != nil {
		t.Fatalf("a second cancel: %v", err)
	}
	select {
	case <-fired:
	case <-ctx.Done():
		t.Fatal("the watch never saw the cancel")
	}
	if marked, err := tb.b.JobCancelled(ctx, job.ID); !marked || err != nil {
		t.Fatalf("JobCancelled after the cancel = %v, %v", marked, err)
	}

	done := newJob("print(2)")
	if _, err := tb.b.PutResult(ctx, &wire.Result{JobID: done.ID, Scope: done.Scope, Status: wire.StatusOK, Stdout: "2\n"}); err != nil {
		t.Fatal(err)
	}
	if err := tb.b.CancelJob(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	if res, err := tb.b.GetResult(ctx, done.ID); err != nil || res.Status != wire.StatusOK || res.Stdout != "2\n" {
		t.Fatalf("a finished job's result after a cancel: %+v, %v", res, err)
	}
}

// A watch that missed the cancel's message still sees the mark: it reads
// it again while the job runs.
func TestWatchCancelRereadsMark(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx, cancel := context.WithTimeout(testCtx(t), time.Minute)
	defer cancel()
	job := newJob("print(1)")
	if err := tb.b.CancelJob(ctx, job.ID); err != nil { // before the watch: its message is gone
		t.Fatal(err)
	}
	fired := make(chan struct{})
	stop, err := tb.b.WatchCancel(job.ID, func() { close(fired) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	select {
	case <-fired:
	case <-ctx.Done():
		t.Fatal("the watch never read the mark")
	}
}
