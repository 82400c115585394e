package broker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/wire"
)

func newBatchJobs(n int) []*wire.Job {
	jobs := make([]*wire.Job, n)
	for i := range jobs {
		j := newJob(fmt.Sprintf("print(%d)", i))
		j.Batch, j.Scope = "b1", "b-test"
		jobs[i] = j
	}
	return jobs
}

// TestSubmitJobsQueuesOnceAndOnlyForBatchConsumers checks that SubmitJobs
// queues every job on the batch subject, which the pool's interactive
// consumer never takes, and that submitting the same jobs again (a client
// that resumes) queues nothing a second time.
func TestSubmitJobsQueuesOnceAndOnlyForBatchConsumers(t *testing.T) {
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	interactive := ackIDs(t, ctx, tb.b, 2, 100)
	jobs := newBatchJobs(50)
	for i, err := range tb.b.SubmitJobs(ctx, jobs) {
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
	}
	for i, err := range tb.b.SubmitJobs(ctx, newCopies(jobs)) {
		if !errors.Is(err, broker.ErrJobSubmitted) {
			t.Fatalf("job %d submitted again: %v, want ErrJobSubmitted", i, err)
		}
	}
	got := make(chan string, 100)
	c, err := tb.b.ConsumeBatch(ctx, wire.DefaultPool, 4, func(context.Context) bool { return true },
		func(ctx context.Context, d *broker.Delivery) {
			_ = d.Ack()
			got <- d.Job.ID
		})
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer(t, c)
	seen := map[string]int{}
	for range jobs {
		seen[recv(t, ctx, got)]++
	}
	for _, j := range jobs {
		if seen[j.ID] != 1 {
			t.Errorf("job %s delivered %d times, want 1", j.ID, seen[j.ID])
		}
	}
	select {
	case id := <-interactive:
		t.Errorf("the interactive consumer took batch job %s", id)
	case id := <-got:
		t.Errorf("job %s delivered once more", id)
	case <-time.After(300 * time.Millisecond):
	}
}

func newCopies(jobs []*wire.Job) []*wire.Job {
	out := make([]*wire.Job, len(jobs))
	for i, j := range jobs {
		c := *j
		out[i] = &c
	}
	return out
}

// TestConsumeBatchWaitsForIdle checks that the batch consumer fetches no
// job while its idle gate says the worker is busy.
func TestConsumeBatchWaitsForIdle(t *testing.T) {
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	if errs := tb.b.SubmitJobs(ctx, newBatchJobs(1)); errs[0] != nil {
		t.Fatal(errs[0])
	}
	var open atomic.Bool
	opened := make(chan struct{})
	got := make(chan string, 1)
	c, err := tb.b.ConsumeBatch(ctx, wire.DefaultPool, 1, func(ctx context.Context) bool {
		select {
		case <-opened:
			return true
		case <-ctx.Done():
			return false
		}
	}, func(ctx context.Context, d *broker.Delivery) {
		if !open.Load() {
			t.Error("a batch job was fetched while the gate was closed")
		}
		_ = d.Ack()
		got <- d.Job.ID
	})
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer(t, c)
	select {
	case <-got:
	case <-time.After(300 * time.Millisecond):
	}
	open.Store(true)
	close(opened)
	recv(t, ctx, got)
}

// TestCancelBatch checks the cancelled mark of a batch's scope.
func TestCancelBatch(t *testing.T) {
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	if c, err := tb.b.BatchCancelled(ctx, "b-one"); err != nil || c {
		t.Fatalf("BatchCancelled before = %v, %v", c, err)
	}
	if err := tb.b.CancelBatch(ctx, "b-one"); err != nil {
		t.Fatal(err)
	}
	if c, err := tb.b.BatchCancelled(ctx, "b-one"); err != nil || !c {
		t.Fatalf("BatchCancelled after = %v, %v", c, err)
	}
	if c, err := tb.b.BatchCancelled(ctx, "b-two"); err != nil || c {
		t.Fatalf("another batch reads cancelled: %v, %v", c, err)
	}
}

// BenchmarkSubmitJobs measures bulk submission into JetStream: jobs per
// second through SubmitJobs in calls of 256 jobs (records, then jobs, each
// phase one round trip), on an in-process server with file storage.
func BenchmarkSubmitJobs(b *testing.B) {
	e := brokertest.StartNATSWith(b, broker.EmbeddedConfig{})
	br := brokertest.Open(b, e, broker.Config{})
	ctx := context.Background()
	const per = 256
	n := 0
	start := time.Now()
	for b.Loop() {
		jobs := make([]*wire.Job, per)
		for i := range jobs {
			jobs[i] = &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Batch: "bench",
				Scope: "b-bench", Code: "print(1)", TimeoutMS: 5000, Deadline: time.Now().Add(time.Hour)}
		}
		for _, err := range br.SubmitJobs(ctx, jobs) {
			if err != nil {
				b.Fatal(err)
			}
		}
		n += per
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "jobs/s")
}
