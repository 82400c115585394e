package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/wire"
)

// Cancelling a job is one write: a mark under "cancel.<id>" in the results
// bucket (job ids have no dots, so it never meets a result's key), kept
// with the results' retention. The write is both the record and the
// signal:
//
//   - a worker that has not started the job yet reads the mark before it
//     starts it (JobCancelled) and stores a cancelled result instead;
//   - a worker running the job listens on the mark's subject while it runs
//     (WatchCancel), so the put reaches it as a message, and it stops the
//     job with everything the job started.
//
// The listener subscribes before the worker reads the mark, so a cancel
// lands in one or the other. A message can still be missed (interest
// still travelling through a NATS cluster, a reconnect), so WatchCancel
// also reads the mark again now and then while the job runs.

// cancelKey is the results-bucket key of jobID's cancel mark.
func cancelKey(jobID string) string { return "cancel." + jobID }

// cancelSubject is the subject a put of jobID's cancel mark is published on.
func cancelSubject(jobID string) string { return "$KV." + wire.ResultsBucket + "." + cancelKey(jobID) }

// CancelJob marks jobID cancelled. It does not look at the job: a job that
// has finished keeps its result (results are create-only, and a worker
// checks the mark only before and while it runs a job). Marking a job
// twice is not an error. Callers check that the job is the caller's.
func (b *Broker) CancelJob(ctx context.Context, jobID string) error {
	if !idRe.MatchString(jobID) {
		return fmt.Errorf("broker: cancel job: invalid job id %q", jobID)
	}
	if !b.nc.IsConnected() {
		return fmt.Errorf("broker: cancel job %s: %w", jobID, ErrNotConnected)
	}
	stamp := []byte(time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := b.results.Create(ctx, cancelKey(jobID), stamp); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("broker: cancel job %s: %w", jobID, err)
	}
	return nil
}

// JobCancelled says whether jobID has been marked cancelled.
func (b *Broker) JobCancelled(ctx context.Context, jobID string) (bool, error) {
	if !idRe.MatchString(jobID) {
		return false, fmt.Errorf("broker: job cancelled: invalid job id %q", jobID)
	}
	set, err := b.hasMark(ctx, cancelKey(jobID))
	if err != nil {
		return false, fmt.Errorf("broker: job cancelled %s: %w", jobID, err)
	}
	return set, nil
}

// JobCancelledAt says whether jobID has been marked cancelled, and when
// (the time CancelJob wrote in the mark).
func (b *Broker) JobCancelledAt(ctx context.Context, jobID string) (time.Time, bool, error) {
	if !idRe.MatchString(jobID) {
		return time.Time{}, false, fmt.Errorf("broker: job cancelled: invalid job id %q", jobID)
	}
	e, err := b.results.Get(ctx, cancelKey(jobID))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("broker: job cancelled %s: %w", jobID, err)
	}
	at, perr := time.Parse(time.RFC3339Nano, string(e.Value()))
	if perr != nil {
		at = e.Created()
	}
	return at, true, nil
}

// hasMark says whether the results bucket holds key: a cancel mark of a
// job (JobCancelled) or of a batch (BatchCancelled).
func (b *Broker) hasMark(ctx context.Context, key string) (bool, error) {
	_, err := b.results.Get(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		return false, nil
	default:
		return false, err
	}
}

// cancelRecheckMin and cancelRecheckMax bound the interval at which
// WatchCancel reads the mark again, in case its message was missed. A job
// shorter than cancelRecheckMin costs no read.
const (
	cancelRecheckMin = time.Second
	cancelRecheckMax = 10 * time.Second
)

// WatchCancel calls cancel, once, when jobID is marked cancelled, until
// the returned stop is called. Call it before JobCancelled, so that a mark
// written in between is not missed.
func (b *Broker) WatchCancel(jobID string, cancel func()) (stop func(), err error) {
	if !idRe.MatchString(jobID) {
		return nil, fmt.Errorf("broker: watch cancel: invalid job id %q", jobID)
	}
	hit := make(chan struct{}, 1)
	sub, err := b.nc.Subscribe(cancelSubject(jobID), func(*nats.Msg) {
		select {
		case hit <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("broker: watch cancel %s: %w", jobID, err)
	}
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		wait := cancelRecheckMin
		timer := time.NewTimer(wait)
		defer timer.Stop()
		for {
			select {
			case <-done:
				return
			case <-hit:
				cancel()
				return
			case <-timer.C:
				ctx, end := context.WithTimeout(context.Background(), waitReadTimeout)
				marked, err := b.JobCancelled(ctx, jobID)
				end()
				if marked && err == nil {
					cancel()
					return
				}
				wait = min(2*wait, cancelRecheckMax)
				timer.Reset(wait)
			}
		}
	}()
	return sync.OnceFunc(func() {
		_ = sub.Unsubscribe()
		close(done)
		<-exited
	}), nil
}
