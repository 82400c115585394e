package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A job whose deliveries ran out (broker.OnExhausted: every worker that
// took it died or gave it back, MaxDeliver times) gets a failed result
// here, so that its caller learns why at once instead of waiting for its
// deadline; then its message leaves the stream. Unless its last attempt
// still runs: a worker starved of CPU past AckWait, several times, keeps
// running the job while the server counts deliveries, and that attempt's
// result is the job's. The result is written create-only, so a result
// stored meanwhile wins.

// exhaustedWait bounds how long the worker looks at an exhausted job's
// claim to tell whether its last attempt still runs.
const exhaustedWait = 2*claimTTL + claimBeat

// startExhausted subscribes the worker to jobs whose deliveries ran out. A
// failure is logged: such jobs are then known by their deadline only.
func (w *Worker) startExhausted() {
	stop, err := w.broker.OnExhausted(w.exhausted)
	if err != nil {
		w.log.Warn("jobs whose deliveries run out will not get a result before their deadline", "err", err)
		return
	}
	w.mu.Lock()
	w.stopExhausted = stop
	w.mu.Unlock()
}

// stopExhaustedJobs unsubscribes; idempotent.
func (w *Worker) stopExhaustedJobs() {
	w.mu.Lock()
	stop := w.stopExhausted
	w.stopExhausted = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// exhausted stores a failed result for e's job unless its last attempt
// still runs, then drops its message.
func (w *Worker) exhausted(e *broker.ExhaustedJob) {
	ctx, cancel := context.WithTimeout(context.Background(), exhaustedWait+10*time.Second)
	defer cancel()
	job := e.Job
	log := jobLogger(w.log, job, e.Deliveries)
	wctx, wcancel := context.WithTimeout(ctx, exhaustedWait)
	over := w.lastAttemptOver(wctx, job.ID)
	wcancel()
	if !over {
		log.Warn("job's deliveries ran out while an attempt still runs (or its holder cannot be told); its result will be the job's")
		return
	}
	res := w.result(job, e.Deliveries, wire.StatusInternal, fmt.Sprintf(
		"the job's deliveries ran out (%d, the most a job gets) and no attempt finished: each worker that took it stopped or died first; it is not tried again",
		e.Deliveries))
	if err := w.storeResult(ctx, res); err != nil {
		log.Error("store the result of a job whose deliveries ran out", "err", err)
		return
	}
	log.Error("job's deliveries ran out without a result; stored as failed", "deliveries", e.Deliveries)
	if err := w.broker.DropExhausted(ctx, e); err != nil {
		log.Warn("drop a job whose deliveries ran out", "err", err)
	}
}

// lastAttemptOver reports whether no attempt of job runs: it has no claim,
// or its claim's holder is dead, or alive without listing the job for two
// renewals (the rules of awaitClaim). It reports false when the holder
// runs the job, or when ctx ends before that can be told.
func (w *Worker) lastAttemptOver(ctx context.Context, job string) bool {
	var held broker.HeldClaim
	var firstBeat uint64
	seen := false
	for {
		cur, found, err := w.broker.GetClaim(ctx, job)
		if err == nil && !found {
			return true
		}
		if err == nil {
			if cur.Revision != held.Revision {
				held, seen = cur, false
			}
			state, beat := w.holder(ctx, held, job)
			switch {
			case state == holderRunning:
				return false
			case state == holderDead:
				return true
			case state == holderAlive && !seen:
				firstBeat, seen = beat, true
			case state == holderAlive && beat >= firstBeat+2:
				return true
			}
		}
		if !sleepCtx(ctx, claimPoll) {
			return false
		}
	}
}
