package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A job sent to one worker reaches that worker's consumer only; the same job
// republished to the pool under another message id reaches the pool.
func TestTargetedJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)

	type got struct{ who, id string }
	ch := make(chan got, 4)
	handler := func(who string) func(context.Context, *broker.Delivery) {
		return func(_ context.Context, d *broker.Delivery) {
			ch <- got{who, d.Job.ID}
			_ = d.Ack()
		}
	}
	pool, err := tb.b.Consume(ctx, wire.DefaultPool, 1, handler("pool"))
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer(t, pool)
	w1, err := tb.b.ConsumeWorker(ctx, wire.DefaultPool, "w1", time.Minute, 1, handler("w1"))
	if err != nil {
		t.Fatal(err)
	}
	stopConsumer(t, w1)

	job := newJob("print(1)")
	if err := tb.b.PublishJob(ctx, job, broker.ToWorker("w1")); err != nil {
		t.Fatal(err)
	}
	if g := recv(t, ctx, ch); g.who != "w1" || g.id != job.ID {
		t.Fatalf("targeted job went to %+v", g)
	}
	// The same job again, to the pool: a new message id gets past dedup.
	if err := tb.b.PublishJob(ctx, job, broker.WithMsgID(job.ID+"-pool")); err != nil {
		t.Fatal(err)
	}
	if g := recv(t, ctx, ch); g.who != "pool" || g.id != job.ID {
		t.Fatalf("republished job went to %+v", g)
	}
	if err := tb.b.PublishJob(ctx, newJob("x"), broker.ToWorker("bad worker")); err == nil {
		t.Error("an invalid worker id was accepted")
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	lines := make(chan string, 4)
	stop, err := tb.b.SubscribeProgress("JOB1", func(l string) { lines <- l })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := tb.b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"one", "two"} {
		if err := tb.b.PublishProgress("JOB1", l); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := recv(t, ctx, lines), recv(t, ctx, lines); a != "one" || b != "two" {
		t.Fatalf("got %q, %q", a, b)
	}
}
