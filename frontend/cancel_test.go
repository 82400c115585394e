package frontend

import (
	"errors"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
)

// CancelJob marks the scope's own job, says a finished job is done and
// leaves its result, and treats another scope's job as an unknown one.
func TestCancelJobScoped(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	ctx := t.Context()

	queued := putRecord(t, jb.b, "scope-a", time.Now().Add(time.Minute))
	if _, err := jb.f.CancelJob(ctx, "scope-b", queued); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("another scope cancelled the job: %v", err)
	}
	if marked, _ := jb.b.JobCancelled(ctx, queued); marked {
		t.Fatal("another scope's cancel left a mark")
	}
	if _, err := jb.f.CancelJob(ctx, "scope-a", ulid.Make().String()); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("an unknown job: %v", err)
	}
	done, err := jb.f.CancelJob(ctx, "scope-a", queued)
	if err != nil || done {
		t.Fatalf("CancelJob = done %v, %v", done, err)
	}
	if marked, err := jb.b.JobCancelled(ctx, queued); !marked || err != nil {
		t.Fatalf("no cancel mark: %v %v", marked, err)
	}

	finished := putRecord(t, jb.b, "scope-a", time.Now().Add(time.Minute))
	if _, err := jb.b.PutResult(ctx, &wire.Result{JobID: finished, Scope: "scope-a", Status: wire.StatusOK, Stdout: "kept\n"}); err != nil {
		t.Fatal(err)
	}
	if done, err := jb.f.CancelJob(ctx, "scope-a", finished); err != nil || !done {
		t.Fatalf("CancelJob of a finished job = done %v, %v", done, err)
	}
	if res, err := jb.b.GetResult(ctx, finished); err != nil || res.Stdout != "kept\n" {
		t.Fatalf("the finished job's result: %+v %v", res, err)
	}
}
