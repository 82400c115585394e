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
	over, held, claimed := w.lastAttemptOver(wctx, job.ID)
	wcancel()
	if !over {
		log.Warn("job's deliveries ran out while an attempt still runs (or its holder cannot be told); its result will be the job's")
		return
	}
	if claimed {
		// The claim is taken over before the failure is stored: a holder
		// judged dead that was only stopped, resumed, then fails to
		// confirm its claim and keeps neither its files nor its result,
		// so the job reported failed leaves nothing behind; a holder that
		// confirmed first makes this fail, and its result is the job's.
		mine := broker.Claim{Worker: w.cfg.ID, Instance: w.instance(), Attempt: e.Deliveries, At: time.Now().UTC()}
		if _, err := w.broker.TakeOverClaim(ctx, job.ID, mine, held.Revision); err != nil {
			log.Warn("job's deliveries ran out, but its claim could not be taken over; its holder's result, if any, will be the job's", "err", err)
			return
		}
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
// runs the job, or when ctx ends before that can be told. held is the
// claim it judged, when claimed.
func (w *Worker) lastAttemptOver(ctx context.Context, job string) (over bool, held broker.HeldClaim, claimed bool) {
	var firstBeat uint64
	seen := false
	for {
		cur, found, err := w.broker.GetClaim(ctx, job)
		if err == nil && !found {
			return true, held, false
		}
		if err == nil {
			if cur.Revision != held.Revision {
				held, seen = cur, false
			}
			state, beat := w.holder(ctx, held, job)
			switch {
			case state == holderRunning:
				return false, held, true
			case state == holderDead:
				return true, held, true
			case state == holderAlive && !seen:
				firstBeat, seen = beat, true
			case state == holderAlive && beat >= firstBeat+2:
				return true, held, true
			}
		}
		if !sleepCtx(ctx, claimPoll) {
			return false, held, held.Revision != 0
		}
	}
}
