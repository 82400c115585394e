package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/wire"
)

// Jobs whose deliveries ran out. A consumer delivers a job at most
// MaxDeliver times; then the server stops delivering it, publishes a
// MAX_DELIVERIES advisory, and leaves the message in the stream with no
// consumer to take it. Without more, a job whose workers died (or gave it
// back) that many times vanished: no result, its caller told only at its
// deadline that no worker ran it. OnExhausted hands each such job to one
// subscriber of a queue group (the workers), which stores a failed result
// unless the job's last attempt still runs (package worker, exhausted.go);
// DropExhausted then removes the message. An advisory is core NATS: one
// sent while no worker listens is lost, and that job is known by its
// deadline only, as before.

// exhaustedQueue is the queue group of the advisories' subscribers.
const exhaustedQueue = "codexec-exhausted"

// exhaustedTimeout bounds reading an exhausted job's message.
const exhaustedTimeout = 5 * time.Second

// ExhaustedJob is a job that a consumer stopped delivering after
// Deliveries deliveries.
type ExhaustedJob struct {
	Job        *wire.Job
	Deliveries int
	seq        uint64
}

// maxDeliveriesAdvisory is what this package reads of the server's
// io.nats.jetstream.advisory.v1.max_deliver advisory.
type maxDeliveriesAdvisory struct {
	Stream     string `json:"stream"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// OnExhausted calls handle, one at a time, for each job of the jobs stream
// that one of its consumers gave up on after MaxDeliver deliveries and that
// is still in the stream, until stop is called. Of the broker connections
// subscribed, one gets each job.
func (b *Broker) OnExhausted(handle func(*ExhaustedJob)) (stop func(), err error) {
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + wire.JobsStream + ".*"
	sub, err := b.nc.QueueSubscribe(subject, exhaustedQueue, func(m *nats.Msg) {
		if e := b.exhaustedJob(m.Data); e != nil {
			handle(e)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("broker: subscribe to max deliveries advisories: %w", err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// exhaustedJob reads the job an advisory names; nil when it is gone or
// cannot be read (logged).
func (b *Broker) exhaustedJob(data []byte) *ExhaustedJob {
	var adv maxDeliveriesAdvisory
	if err := json.Unmarshal(data, &adv); err != nil || adv.Stream != wire.JobsStream {
		b.log.Warn("unreadable max deliveries advisory", "err", err)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), exhaustedTimeout)
	defer cancel()
	m, err := b.jobs.GetMsg(ctx, adv.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acked after all
	}
	if err != nil {
		b.log.Warn("read a job whose deliveries ran out", "seq", adv.StreamSeq, "err", err)
		return nil
	}
	job, reason := decodeJob(m.Data)
	if reason != "" {
		b.log.Warn("a job whose deliveries ran out is undecodable", "seq", adv.StreamSeq, "reason", reason)
		return nil
	}
	return &ExhaustedJob{Job: job, Deliveries: int(adv.Deliveries), seq: adv.StreamSeq}
}

// DropExhausted removes e's message from the stream, and its code blob if
// any: call it once the job's result is stored.
func (b *Broker) DropExhausted(ctx context.Context, e *ExhaustedJob) error {
	if err := b.jobs.DeleteMsg(ctx, e.seq); err != nil {
		// The server answers a sequence already gone with a generic
		// failure: look.
		if _, gerr := b.jobs.GetMsg(ctx, e.seq); !errors.Is(gerr, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("broker: drop job %s: %w", e.Job.ID, err)
		}
	}
	if e.Job.CodeRef != "" {
		if err := b.blobs.Delete(ctx, e.Job.CodeRef); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("broker: drop job %s: code blob: %w", e.Job.ID, err)
		}
	}
	return nil
}
