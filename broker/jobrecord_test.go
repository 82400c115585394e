package broker_test

import (
	"errors"
	"strings"
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
	recErr, pubErr := tb.b.SubmitJob(ctx, broker.RecordOf(job), job, func(error) { t.Error("recorded called while disconnected") })
	if !errors.Is(recErr, broker.ErrNotConnected) || !broker.NotSent(pubErr) {
		t.Errorf("SubmitJob while disconnected = %v, %v, want ErrNotConnected and not sent", recErr, pubErr)
	}
	if n, _ := tb.b.Conn().Buffered(); n != 0 {
		t.Errorf("%d bytes wait in the reconnect buffer", n)
	}
}

// SubmitJob sends a job's record and the job without waiting in between:
// the record is stored when recorded is called, the job is delivered, a
// second submit of the same job is no error, and a job that cannot be sent
// leaves no record.
func TestSubmitJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	ids := ackIDs(t, ctx, tb.b, 1, 4)

	job := newJob("print(1)")
	calls := 0
	recErr, pubErr := tb.b.SubmitJob(ctx, broker.RecordOf(job), job, func(err error) {
		calls++
		if err != nil {
			t.Errorf("recorded(%v), want nil", err)
		}
		if rec, err := tb.b.GetJobRecord(ctx, job.ID); err != nil || rec.Scope != job.Scope {
			t.Errorf("GetJobRecord when recorded is called = %+v, %v", rec, err)
		}
	})
	if recErr != nil || pubErr != nil || calls != 1 {
		t.Fatalf("SubmitJob = %v, %v with %d calls of recorded, want nil, nil, 1", recErr, pubErr, calls)
	}
	select {
	case id := <-ids:
		if id != job.ID {
			t.Errorf("delivered %s, want %s", id, job.ID)
		}
	case <-ctx.Done():
		t.Fatal("the submitted job was not delivered")
	}
	// Again (a retry): the record exists and the job is a duplicate.
	if recErr, pubErr := tb.b.SubmitJob(ctx, broker.RecordOf(job), job, nil); recErr != nil || pubErr != nil {
		t.Errorf("SubmitJob of the same job again = %v, %v, want nil, nil", recErr, pubErr)
	}

	big := newJob(strings.Repeat("x", broker.MaxJobBytes+1))
	recErr, pubErr = tb.b.SubmitJob(ctx, broker.RecordOf(big), big, func(error) { t.Error("recorded called for a job that cannot be sent") })
	if !errors.Is(pubErr, wire.ErrPayloadTooLarge) || recErr == nil {
		t.Errorf("SubmitJob of a job too large = %v, %v, want an error and ErrPayloadTooLarge", recErr, pubErr)
	}
	if _, err := tb.b.GetJobRecord(ctx, big.ID); !errors.Is(err, broker.ErrNoJobRecord) {
		t.Errorf("a job too large to send left a record: %v", err)
	}
}
