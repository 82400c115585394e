package broker_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A job given back MaxDeliver times is no longer delivered: OnExhausted
// hands it over with its delivery count, and DropExhausted takes its
// message out of the stream, where the server left it.
func TestOnExhaustedHandsOverJobsOutOfDeliveries(t *testing.T) {
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{MaxDeliver: 2})
	ctx := testCtx(t)
	got := make(chan *broker.ExhaustedJob, 2)
	stop, err := tb.b.OnExhausted(func(e *broker.ExhaustedJob) { got <- e })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	job := newJob("print('given back')")
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	c := consume(t, ctx, tb.b, 1, func(ctx context.Context, d *broker.Delivery) { _ = d.Nak(0) })
	defer stopConsumer(t, c)
	e := recv(t, ctx, got)
	if e.Job.ID != job.ID || e.Deliveries != 2 {
		t.Fatalf("exhausted job %s after %d deliveries, want %s after 2", e.Job.ID, e.Deliveries, job.ID)
	}
	if n := poolMessages(t, ctx, tb); n != 1 {
		t.Fatalf("stream holds %d jobs before the drop, want the exhausted one", n)
	}
	if err := tb.b.DropExhausted(ctx, e); err != nil {
		t.Fatal(err)
	}
	if n := poolMessages(t, ctx, tb); n != 0 {
		t.Errorf("stream holds %d jobs after the drop, want 0", n)
	}
	if err := tb.b.DropExhausted(ctx, e); err != nil {
		t.Errorf("dropped twice: %v", err)
	}
}

func poolMessages(t *testing.T, ctx context.Context, tb *testBundle) uint64 {
	t.Helper()
	s, err := tb.js.Stream(ctx, wire.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.JobSubject(wire.DefaultPool)))
	if err != nil {
		t.Fatal(err)
	}
	return si.State.Subjects[wire.JobSubject(wire.DefaultPool)]
}
