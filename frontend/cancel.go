package frontend

import (
	"context"
	"errors"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// Cancellation. A call that ends before its job's result (the client sent
// notifications/cancelled, closed its HTTP request or its stdio pipe, or
// cancelled the task the call runs as) cancels its job: broker.CancelJob
// marks it, and whichever worker holds it stops it with every process it
// started, or never starts it (see broker/cancel.go and worker/cancel.go).
// A frontend that stops does not cancel its calls' jobs: they run on, and
// get_job_result or the task answers for them from any frontend.

// errFrontendStopped is the cause of a call's context ended by Abort.
var errFrontendStopped = errors.New("frontend: stopped before the call finished")

// cancelPatience bounds writing a cancel mark.
const cancelPatience = 5 * time.Second

// callCancelled says ctx, a call's context, ended because its caller went
// away or cancelled it, not because the frontend stops.
func callCancelled(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(context.Cause(ctx), errFrontendStopped)
}

// ErrUnknownJob is CancelJob's error for a job id that is not one of the
// scope's jobs (never submitted, another scope's, or past retention).
var ErrUnknownJob = errors.New("frontend: no such job in this scope")

// CancelJob cancels job id of scope: a job still queued is never run, a
// running one is stopped on whichever worker runs it, with everything it
// started, and its result says cancelled (wire.StatusCancelled). A job
// that has finished keeps its result, and cancelling it again does
// nothing; done says the job had a result already. It returns an error
// wrapping ErrUnknownJob for a job that is not scope's.
func (f *Frontend) CancelJob(ctx context.Context, scope, id string) (done bool, err error) {
	rec, err := f.broker.GetJobRecord(ctx, id)
	switch {
	case errors.Is(err, broker.ErrNoJobRecord):
		if u := f.unqueued.get(id); u != nil && u.rec.Scope == scope {
			return false, f.broker.CancelJob(ctx, id)
		}
		return false, ErrUnknownJob
	case err != nil:
		return false, err
	case rec.Scope != scope:
		return false, ErrUnknownJob
	}
	if _, err := f.broker.GetResult(ctx, id); err == nil {
		return true, nil
	}
	return false, f.broker.CancelJob(ctx, id)
}

// cancelAbandoned cancels job when ctx, its call's context, was cancelled
// by the caller. It reports whether it did.
func (f *Frontend) cancelAbandoned(ctx context.Context, job *wire.Job) bool {
	if !callCancelled(ctx) {
		return false
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelPatience)
	defer cancel()
	if err := f.broker.CancelJob(cctx, job.ID); err != nil {
		f.log.Warn("cancel the job of a cancelled call; trying again while the job may run", "job", job.ID, "err", err)
		f.cancelsLater.Add(1)
		go func() {
			defer f.cancelsLater.Done()
			f.cancelLater(job)
		}()
		return false
	}
	f.log.Info("call cancelled; its job is cancelled", "job", job.ID, "cause", context.Cause(ctx))
	return true
}

// cancelRetry is how often cancelLater tries to write a cancel mark again.
const cancelRetry = time.Second

// cancelLater writes the cancel mark of job, whose call was cancelled, that
// cancelAbandoned could not write (NATS away): again every cancelRetry,
// until it is written, the job has a result, the job can no longer run
// (past its deadline to start, plus its timeout), the frontend stops
// hard, or its broker is closed (nothing it writes can succeed then). Until 2026-12-04 the first failure was the end of it: a call
// cancelled while NATS was away for longer than cancelPatience left its
// job queued or running, and the job ran to its end once NATS was back,
// its effects done for a caller that had cancelled it.
func (f *Frontend) cancelLater(job *wire.Job) {
	until := job.Deadline.Add(time.Duration(job.TimeoutMS) * time.Millisecond)
	if job.Deadline.IsZero() {
		until = time.Now().Add(f.taskDeadline())
	}
	tick := time.NewTicker(cancelRetry)
	defer tick.Stop()
	for time.Now().Before(until) {
		select {
		case <-f.hard.Done():
			return
		case <-f.broker.Closed():
			f.log.Warn("the job of a cancelled call could not be cancelled: the frontend's NATS connection is closed", "job", job.ID)
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), cancelPatience)
		if _, err := f.broker.GetResult(ctx, job.ID); err == nil {
			cancel()
			return // over: nothing to cancel
		}
		err := f.broker.CancelJob(ctx, job.ID)
		cancel()
		if err == nil {
			f.log.Info("call cancelled; its job is cancelled, NATS answering again", "job", job.ID)
			return
		}
	}
	f.log.Warn("the job of a cancelled call could not be cancelled before it could no longer run", "job", job.ID)
}

// cancelSettle bounds how long a cancelled task waits for its job's
// cancelled result, which carries what the job printed until it stopped.
const cancelSettle = 10 * time.Second

// settledResult is, for a call that runs as a task, the result its
// cancelled job gets from its worker, or nil when none comes within
// cancelSettle (nor for a blocking call, whose caller is gone).
func (f *Frontend) settledResult(ctx context.Context, job *wire.Job) *wire.Result {
	if _, inTask := ctx.Value(taskScopeKey{}).(string); !inTask {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelSettle)
	defer cancel()
	res, err := f.broker.WaitResult(wctx, job.ID)
	if err != nil {
		return nil
	}
	return res
}
