package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/wire"
)

// Batch jobs (wire/batch.go) are submitted many at a time, one round trip
// per phase for the lot: every job's record is sent asynchronously, create-
// only, and the acknowledgements awaited together; then every job whose
// record was new is published asynchronously with its Nats-Msg-Id and the
// acknowledgements awaited together. A record that exists already means
// the job was submitted before (batch job ids are derived from the batch,
// the row and the attempt, so a client that resumes sends the same id), and
// the job is not published again unless nothing says it was ever delivered
// (batch_requeue.go): a record can be left without its message by a
// submitter that died between the two writes.

// ErrJobSubmitted is returned, wrapped, by SubmitJobs for a job whose record
// exists already: it was submitted before and is not published again.
var ErrJobSubmitted = errors.New("broker: job submitted before")

// SubmitJobs submits batch jobs (each with Batch set) on
// wire.BatchSubject(job.Pool): errs[i] is nil when jobs[i] is queued,
// wraps ErrJobSubmitted when it was submitted before (and is queued again
// when it had no result, no claim and its message may be lost), and is any other
// failure otherwise (NotSent tells whether the job may have been stored
// all the same). It stamps each job as PublishJob does.
func (b *Broker) SubmitJobs(ctx context.Context, jobs []*wire.Job) (errs []error) {
	errs = make([]error, len(jobs))
	msgs := make([]*jobMsg, len(jobs))
	recs := make([]jetstream.PubAckFuture, len(jobs))
	for i, job := range jobs {
		msgs[i], recs[i], errs[i] = b.sendBatchRecord(ctx, job)
	}
	for i, f := range recs {
		if f != nil {
			errs[i] = b.settleBatchRecord(ctx, f, jobs[i])
		}
	}
	again := b.requeueSubmitted(ctx, jobs, msgs, errs)
	pubs := make([]jetstream.PubAckFuture, len(jobs))
	for i, m := range msgs {
		if errs[i] == nil || again[i] {
			pubs[i], errs[i] = b.js.PublishMsgAsync(&nats.Msg{Subject: m.subject, Data: m.data},
				jetstream.WithMsgID(m.msgID), jetstream.WithExpectStream(wire.JobsStream))
		}
	}
	for i, f := range pubs {
		if f == nil {
			continue
		}
		if err := awaitAck(ctx, f); err != nil && ctx.Err() == nil {
			// The synchronous way rides out a leader election; the msg id
			// keeps a job that was stored after all from being stored twice.
			err = b.publishJobMsg(ctx, msgs[i].subject, msgs[i].data, msgs[i].msgID)
			errs[i] = err
		} else {
			errs[i] = err
		}
		switch {
		case errs[i] != nil:
			errs[i] = fmt.Errorf("broker: publish job %s: %w", jobs[i].ID, errs[i])
		case again[i]:
			b.jobPublished()
			errs[i] = fmt.Errorf("broker: job %s: %w", jobs[i].ID, ErrJobSubmitted)
		default:
			b.jobPublished()
		}
	}
	return errs
}

// sendBatchRecord checks and encodes job for SubmitJobs and sends its record.
func (b *Broker) sendBatchRecord(ctx context.Context, job *wire.Job) (*jobMsg, jetstream.PubAckFuture, error) {
	if job == nil || job.Batch == "" {
		return nil, nil, errors.New("broker: submit jobs: a job without a batch")
	}
	m, err := b.jobMessage(ctx, job)
	if err != nil {
		return nil, nil, err
	}
	m.subject = wire.BatchSubject(job.Pool)
	data, err := b.recordData(RecordOf(job))
	if err != nil {
		return nil, nil, err
	}
	f, err := b.js.PublishMsgAsync(&nats.Msg{Subject: jobRecordSubject(job.ID), Data: data},
		jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil {
		return nil, nil, fmt.Errorf("broker: put job record %s: %w", job.ID, err)
	}
	return m, f, nil
}

// settleBatchRecord waits for the acknowledgement of job's record: nil when
// the record is new, ErrJobSubmitted when it existed. A failure other than
// that is tried once more the synchronous way, which cannot tell a record
// it finds from one it wrote: that job counts as submitted before only when
// the record was there before the retry.
func (b *Broker) settleBatchRecord(ctx context.Context, f jetstream.PubAckFuture, job *wire.Job) error {
	err := awaitAck(ctx, f)
	if err == nil {
		return nil
	}
	if recordExists(err) {
		return fmt.Errorf("broker: job %s: %w", job.ID, ErrJobSubmitted)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("broker: put job record %s: %w", job.ID, err)
	}
	if _, gerr := b.GetJobRecord(ctx, job.ID); gerr == nil {
		return fmt.Errorf("broker: job %s: %w", job.ID, ErrJobSubmitted)
	}
	return b.PutJobRecord(ctx, RecordOf(job))
}

// recordExists says that err is a create-only write finding its key.
func recordExists(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// batchCancelKey is the results-bucket key that marks the batch whose jobs
// run in scope as cancelled (keys of job ids have no dots, records start
// with "job." and jobs' cancel marks with "cancel.").
func batchCancelKey(scope string) string { return "batchcancel." + scope }

// CancelBatch marks the batch whose jobs run in scope as cancelled: a
// worker that receives one of its jobs afterwards does not start it
// (BatchCancelled). The mark lives as long as results do.
func (b *Broker) CancelBatch(ctx context.Context, scope string) error {
	if !wire.ValidScope(scope) {
		return fmt.Errorf("broker: cancel batch: invalid scope %q", scope)
	}
	if _, err := b.results.Put(ctx, batchCancelKey(scope), []byte(time.Now().UTC().Format(time.RFC3339Nano))); err != nil {
		return fmt.Errorf("broker: cancel batch %s: %w", scope, err)
	}
	return nil
}

// BatchCancelled reports whether the batch whose jobs run in scope was
// cancelled.
func (b *Broker) BatchCancelled(ctx context.Context, scope string) (bool, error) {
	if !wire.ValidScope(scope) {
		return false, fmt.Errorf("broker: batch cancelled: invalid scope %q", scope)
	}
	set, err := b.hasMark(ctx, batchCancelKey(scope))
	if err != nil {
		return false, fmt.Errorf("broker: batch cancelled %s: %w", scope, err)
	}
	return set, nil
}

// ConsumeBatch is Consume for the batch jobs of pool (wire.BatchSubject),
// on a durable consumer shared by the pool's workers. Before it asks the
// server for a job, with a slot of its own free, it calls idle, which
// blocks until the worker may start a batch job (it has an idle slot) and
// returns false when its context ends; so batch jobs fill the slots that
// interactive jobs leave idle.
func (b *Broker) ConsumeBatch(ctx context.Context, pool string, concurrency int, idle func(context.Context) bool, handle func(context.Context, *Delivery)) (*Consumer, error) {
	if !wire.ValidPool(pool) {
		return nil, fmt.Errorf("broker: consume batch: invalid pool %q", pool)
	}
	if concurrency < 1 || handle == nil || idle == nil {
		return nil, fmt.Errorf("broker: consume batch of pool %s: concurrency below 1, or nil handler or idle", pool)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       wire.BatchConsumerName(pool),
		Description:   "codexec workers of pool " + pool + ", batch jobs",
		FilterSubject: wire.BatchSubject(pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       b.cfg.AckWait,
		MaxDeliver:    b.cfg.MaxDeliver,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	c := b.newConsumer(cfg, pool, concurrency, handle)
	c.idle = idle
	return startBound(ctx, c, nil)
}
