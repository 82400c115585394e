package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A submitter killed between a batch job's record and its message (a
// `codexec batch` SIGKILLed in the middle of a call) leaves the record
// alone. Submitted again, the job is queued again, under its id, with the
// record's deadline; jobs whose record says they were submitted and that
// were delivered (a result, a claim) or whose deadline passed are not.
func TestSubmitJobsRequeuesRecordWithoutMessage(t *testing.T) {
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	jobs := newBatchJobs(4)
	lost, done, claimed, expired := jobs[0], jobs[1], jobs[2], jobs[3]
	lost.Deadline = time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	expired.Deadline = time.Now().Add(-time.Second).UTC()
	for _, j := range jobs {
		j.EnqueuedAt = time.Now().UTC()
		if err := tb.b.PutJobRecord(ctx, broker.RecordOf(j)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.b.PutResult(ctx, newResult(done.ID, "ran")); err != nil {
		t.Fatal(err)
	}
	if _, won, err := tb.b.ClaimJob(ctx, claimed.ID, broker.Claim{Worker: "w1", Instance: "w1@1", Attempt: 1}); err != nil || !won {
		t.Fatalf("claim: won %v, %v", won, err)
	}

	copies := newCopies(jobs)
	for _, c := range copies {
		c.Deadline = time.Now().Add(2 * time.Hour).UTC()
	}
	for i, err := range tb.b.SubmitJobs(ctx, copies) {
		if !errors.Is(err, broker.ErrJobSubmitted) {
			t.Errorf("job %d: %v, want ErrJobSubmitted", i, err)
		}
	}
	s, err := tb.js.Stream(ctx, wire.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.BatchSubject(wire.DefaultPool)))
	if err != nil {
		t.Fatal(err)
	}
	if n := si.State.Subjects[wire.BatchSubject(wire.DefaultPool)]; n != 1 {
		t.Fatalf("stream holds %d batch jobs, want 1 (the one whose message was lost)", n)
	}
	got := make(chan *wire.Job, 4)
	c, err := tb.b.ConsumeBatch(ctx, wire.DefaultPool, 2, func(context.Context) bool { return true },
		func(ctx context.Context, d *broker.Delivery) {
			_ = d.Ack()
			got <- d.Job
		})
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer(t, c)
	j := recv(t, ctx, got)
	if j.ID != lost.ID || !j.Deadline.Equal(lost.Deadline) {
		t.Errorf("delivered job %s, deadline %s; want %s with its record's deadline %s", j.ID, j.Deadline, lost.ID, lost.Deadline)
	}

	// Once delivered and claimed, submitting it again queues nothing.
	if _, won, err := tb.b.ClaimJob(ctx, lost.ID, broker.Claim{Worker: "w1", Instance: "w1@1", Attempt: 1}); err != nil || !won {
		t.Fatalf("claim: won %v, %v", won, err)
	}
	if err := tb.b.SubmitJobs(ctx, newCopies(jobs[:1]))[0]; !errors.Is(err, broker.ErrJobSubmitted) {
		t.Fatalf("submitted again: %v, want ErrJobSubmitted", err)
	}
	select {
	case j := <-got:
		t.Errorf("job %s delivered once more", j.ID)
	case <-time.After(300 * time.Millisecond):
	}
}
