package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codexec/codexec/wire"
)

// A batch job is submitted in two writes: its record, then its message. A
// submitter that dies between the two (a `codexec batch` killed in the
// middle of a call, with its embedded server) leaves a record and no
// message; so does a publish that failed for good after the record was
// written. The record alone then said "submitted before" to every later
// submission of the job, which did not publish it: the job was never
// delivered, and the client that resumed the batch waited for it until the
// record's deadline.
//
// So a job whose record exists is published again, under its own job id,
// unless it is known to have been delivered: it has a result, or a claim
// (a worker took it; a claim left by a dead worker is the redelivery's
// business, and the message is still in the stream until a result is
// stored). Otherwise the job may still sit in the stream, queued; the
// Nats-Msg-Id drops the copy within the duplicate window, and after it the
// copy is harmless: the first delivery of either claims the job, and the
// other finds the claim, waits for the result and is acked without running
// the job (package worker, claim.go). The copy keeps the record's deadline,
// so that no worker starts it after the frontend has reported the job
// expired; a job past that deadline is not published again.

// requeueSubmitted returns, for jobs whose record existed (errs[i] wraps
// ErrJobSubmitted), the message to publish again: again[i] is set and
// msgs[i] replaced when the job must be queued again. A job whose state
// cannot be read gets that error in errs[i] (not queued: submit it again).
func (b *Broker) requeueSubmitted(ctx context.Context, jobs []*wire.Job, msgs []*jobMsg, errs []error) (again []bool) {
	again = make([]bool, len(jobs))
	for i, job := range jobs {
		if !errors.Is(errs[i], ErrJobSubmitted) {
			continue
		}
		m, err := b.lostJobMessage(ctx, job)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("broker: job %s submitted before, its state unreadable: %w", job.ID, err)
		case m != nil:
			b.log.Info("batch job submitted before without its message; queuing it again", "job_id", job.ID)
			msgs[i], again[i] = m, true
		}
	}
	return again
}

// lostJobMessage returns job's message to publish again when nothing says
// that the job, whose record exists, was delivered: no result, no claim,
// and the record's deadline still ahead. It returns nil when the job needs
// no message.
func (b *Broker) lostJobMessage(ctx context.Context, job *wire.Job) (*jobMsg, error) {
	if _, err := b.storedResult(ctx, job.ID); !errors.Is(err, wire.ErrResultNotFound) {
		return nil, err // stored (nil), or unreadable
	}
	if _, claimed, err := b.GetClaim(ctx, job.ID); err != nil || claimed {
		return nil, err
	}
	rec, err := b.GetJobRecord(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	if !rec.Deadline.IsZero() && time.Now().After(rec.Deadline) {
		return nil, nil
	}
	job.EnqueuedAt, job.Deadline = rec.EnqueuedAt, rec.Deadline
	m, err := b.jobMessage(ctx, job)
	if err != nil {
		return nil, err
	}
	m.subject = wire.BatchSubject(job.Pool)
	return m, nil
}
