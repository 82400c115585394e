package broker_test

import (
	"context"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/wire"
)

// BenchmarkRoundTrip measures one job's way through the broker: publish,
// consume, PutResult, Ack, WaitResult, on an in-process server.
func BenchmarkRoundTrip(b *testing.B) {
	e := brokertest.StartNATSWith(b, broker.EmbeddedConfig{})
	br := brokertest.Open(b, e, broker.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	c, err := br.Consume(ctx, wire.DefaultPool, 8, func(ctx context.Context, d *broker.Delivery) {
		r := &wire.Result{JobID: d.Job.ID, Status: wire.StatusOK, Stdout: "42\n", Attempt: d.Attempt}
		if _, err := br.PutResult(ctx, r); err != nil {
			b.Error(err)
		}
		if err := d.Ack(); err != nil {
			b.Error(err)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	stopConsumer(b, c)
	for b.Loop() {
		job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool,
			Scope: "bench", Code: "print(6 * 7)", TimeoutMS: 5000}
		if err := br.PublishJob(ctx, job); err != nil {
			b.Fatal(err)
		}
		if _, err := br.WaitResult(ctx, job.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSubmit measures what a call spends queueing its job: the job's
// record, then the job, one round trip after the other (sequential) or
// sent together (SubmitJob), on an in-process server, with a consumer
// taking the jobs.
func BenchmarkSubmit(b *testing.B) {
	e := brokertest.StartNATSWith(b, broker.EmbeddedConfig{})
	br := brokertest.Open(b, e, broker.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	c, err := br.Consume(ctx, wire.DefaultPool, 8, func(ctx context.Context, d *broker.Delivery) {
		if err := d.Ack(); err != nil {
			b.Error(err)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	stopConsumer(b, c)
	newJob := func() *wire.Job {
		return &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool,
			Scope: "bench", Code: "print(6 * 7)", TimeoutMS: 5000}
	}
	b.Run("sequential", func(b *testing.B) {
		for b.Loop() {
			job := newJob()
			if err := br.PutJobRecord(ctx, broker.RecordOf(job)); err != nil {
				b.Fatal(err)
			}
			if err := br.PublishJob(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("together", func(b *testing.B) {
		for b.Loop() {
			job := newJob()
			if recErr, pubErr := br.SubmitJob(ctx, broker.RecordOf(job), job, nil); recErr != nil || pubErr != nil {
				b.Fatal(recErr, pubErr)
			}
		}
	})
}

// BenchmarkCancelCheck measures what every job pays on its worker for
// being cancellable: the watch on its cancel mark, one read of the mark,
// and the end of the watch (watch), beside one job's round trip through
// the broker (roundtrip, as BenchmarkRoundTrip) for scale.
func BenchmarkCancelCheck(b *testing.B) {
	e := brokertest.StartNATSWith(b, broker.EmbeddedConfig{})
	br := brokertest.Open(b, e, broker.Config{})
	ctx := context.Background()
	b.Run("watch", func(b *testing.B) {
		for b.Loop() {
			id := ulid.Make().String()
			stop, err := br.WatchCancel(id, func() {})
			if err != nil {
				b.Fatal(err)
			}
			if marked, err := br.JobCancelled(ctx, id); marked || err != nil {
				b.Fatal(marked, err)
			}
			stop()
		}
	})
	b.Run("roundtrip", BenchmarkRoundTrip)
}
