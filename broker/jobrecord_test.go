package broker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A job's record is written create-only beside the results, read back as
// written, never taken for the job's result, and gone once deleted.
func TestJobRecord(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	job := newJob("print(1)")
	job.EnqueuedAt = time.Now().UTC().Truncate(time.Millisecond)
	job.Deadline = job.Deadline.Truncate(time.Millisecond)
	if _, err := tb.b.GetJobRecord(ctx, job.ID); !errors.Is(err, broker.ErrNoJobRecord) {
		t.Fatalf("GetJobRecord before any = %v, want ErrNoJobRecord", err)
	}
	if err := tb.b.PutJobRecord(ctx, broker.RecordOf(job)); err != nil {
		t.Fatal(err)
	}
	other := broker.RecordOf(job)
	other.Scope = "another-scope"
	if err := tb.b.PutJobRecord(ctx, other); err != nil {
		t.Fatalf("a second record of the same job: %v, want nil (the first is kept)", err)
	}
	rec, err := tb.b.GetJobRecord(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := broker.JobRecord{V: wire.Version, JobID: job.ID, Scope: job.Scope, Kind: job.Kind,
		EnqueuedAt: job.EnqueuedAt, Deadline: job.Deadline, TimeoutMS: job.TimeoutMS}
	if !rec.EnqueuedAt.Equal(want.EnqueuedAt) || !rec.Deadline.Equal(want.Deadline) {
		t.Errorf("record times %v %v, want %v %v", rec.EnqueuedAt, rec.Deadline, want.EnqueuedAt, want.Deadline)
	}
	rec.EnqueuedAt, rec.Deadline, want.EnqueuedAt, want.Deadline = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if *rec != want {
		t.Errorf("record %+v, want %+v", *rec, want)
	}
	if _, err := tb.b.GetResult(ctx, job.ID); !errors.Is(err, wire.ErrResultNotFound) {
		t.Errorf("GetResult of a job with only a record = %v, want ErrResultNotFound", err)
	}
	if stored, err := tb.b.PutResult(ctx, newResult(job.ID, "1\n")); err != nil || !stored {
		t.Fatalf("PutResult of a recorded job = %v, %v", stored, err)
	}
	if err := tb.b.DeleteJobRecord(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.GetJobRecord(ctx, job.ID); !errors.Is(err, broker.ErrNoJobRecord) {
		t.Errorf("GetJobRecord after delete = %v, want ErrNoJobRecord", err)
	}
	if _, err := tb.b.GetJobRecord(ctx, ulid.Make().String()); !errors.Is(err, broker.ErrNoJobRecord) {
		t.Errorf("GetJobRecord of an unknown job = %v, want ErrNoJobRecord", err)
	}
}

// While NATS is down nothing is sent: neither a job nor its record waits in
// the client's reconnect buffer to be delivered at some later reconnect.
func TestPublishWhileDisconnected(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	tb.e.Shutdown()
	for tb.b.Conn().IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	job := newJob("print(1)")
	if err := tb.b.PublishJob(ctx, job); !errors.Is(err, broker.ErrNotConnected) {
		t.Errorf("PublishJob while disconnected = %v, want ErrNotConnected", err)
	}
	if err := tb.b.PutJobRecord(ctx, broker.RecordOf(job)); !errors.Is(err, broker.ErrNotConnected) {
		t.Errorf("PutJobRecord while disconnected = %v, want ErrNotConnected", err)
	}
	if n, _ := tb.b.Conn().Buffered(); n != 0 {
		t.Errorf("%d bytes wait in the reconnect buffer", n)
	}
}
