package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// Claims: a job runs once per live claim.
//
// JetStream delivers a job again when its lease lapses, and a lease also
// lapses when the worker running the job is alive but cut off from NATS
// (a NATS restart). So before a worker starts a job it claims it in the
// broker's claims bucket (create-only), and a delivery that finds the job
// claimed by another live attempt does not start it: it waits, holding the
// delivery with InProgress (which costs no delivery against MaxDeliver),
// until the result is stored, then acks it; it takes the claim over
// (atomically, by revision) only when the holder is dead or no longer runs
// the job.
//
// A claim's liveness is not NATS's but the state store's, so that it
// survives a NATS outage: a worker running claimed jobs keeps a record in
// the Claimants presence set (its instance and the jobs it runs), renewed
// every claimBeat and living claimTTL, so that a dead worker's claims lapse
// a few seconds after its death. The holder is
//   - alive and running the job: its record has the claim's instance and
//     lists the job (a job is listed before its claim is written);
//   - dead: no record, or one of another instance (a restart under the
//     same id);
//   - alive but done with the job without a result (a claim left behind):
//     two renewals of its record after the claim was read still do not list
//     the job. Renewals are written one at a time, in order, so the second
//     one was taken after the claim was read.
// A state store that cannot be read tells nothing: the delivery waits.

const (
	// claimBeat is how often a worker running claimed jobs renews its
	// Claimants record.
	claimBeat = 2 * time.Second
	// claimTTL is how long a Claimants record lives without a renewal: how
	// long after a worker's death its claims still count as alive.
	claimTTL = 3 * claimBeat
	// claimPoll is how often a delivery waiting on a live claim looks at the
	// result and at the holder again.
	claimPoll = 500 * time.Millisecond
)

// claimantRecord is a worker's record in the Claimants presence set.
type claimantRecord struct {
	Instance string   `json:"instance"`
	Beat     uint64   `json:"beat"`
	Jobs     []string `json:"jobs"`
}

// claimants is a worker's side of the claims: the jobs it runs and the
// renewal of its Claimants record while it runs any. The zero value is ready.
type claimants struct {
	mu      sync.Mutex
	jobs    map[string]int // job id → handlers of this worker running it
	beat    uint64         // the last renewal's number
	lastOK  time.Time      // when a renewal last succeeded
	beating bool
	stop    chan struct{} // stops the renewal loop
	done    chan struct{} // closed when the renewal loop has returned
	ready   chan struct{} // closed once the loop's first renewal was tried

	touchMu sync.Mutex // renewals are written one at a time, in order
}

// instance names this run of the worker process: its id and start time.
func (w *Worker) instance() string {
	return w.cfg.ID + "@" + strconv.FormatInt(w.started.UnixNano(), 36)
}

// myClaim is the claim this worker makes for delivery d.
func (w *Worker) myClaim(d *broker.Delivery) broker.Claim {
	return broker.Claim{Worker: w.cfg.ID, Instance: w.instance(), Attempt: d.Attempt, At: time.Now().UTC()}
}

// jobClaim is a claim this worker holds, for as long as its handler runs.
type jobClaim struct {
	w    *Worker
	job  string
	held broker.HeldClaim
}

// end says that the handler is done with the job.
func (c *jobClaim) end() { c.w.leaveJob(c.job) }

// release deletes the claim, so that the next delivery of the job claims
// it at once: for a job given back without a result. Best effort: a claim
// left behind is taken over once this worker's record stops listing the job.
func (c *jobClaim) release(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.w.broker.ReleaseClaim(ctx, c.job, c.held.Revision); err != nil {
		log.Warn("release claim", "err", err)
	}
}

// claimJob decides whether this delivery runs its job, and returns the
// claim when it does. When it does not, d is settled: acked when the
// result is stored, or by a stopping consumer. Failures of the state store
// or of the claims bucket are waited out, the delivery held: a Nak would
// spend one of the job's deliveries (MaxDeliver) on each.
func (w *Worker) claimJob(ctx context.Context, d *broker.Delivery, log *slog.Logger) (*jobClaim, bool) {
	job := d.Job.ID
	// Only a redelivery can find a result, so a first delivery skips the
	// lookup.
	if d.Attempt > 1 && w.resultStored(ctx, d, log) {
		return nil, false
	}
	for warned := false; ; warned = true {
		if !w.enterJobWaiting(ctx, job, log) {
			return nil, false
		}
		held, won, err := w.broker.ClaimJob(ctx, job, w.myClaim(d))
		if err == nil && won {
			return &jobClaim{w: w, job: job, held: held}, true
		}
		w.leaveJob(job)
		if err == nil {
			return w.awaitClaim(ctx, d, held, log)
		}
		if !warned {
			log.Warn("claim failed; retrying", "err", err)
		}
		if !sleepCtx(ctx, claimPoll) {
			return nil, false // a hard stop: the consumer has settled d
		}
	}
}

// sleepCtx waits for d, and reports false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// resultStored acks d and reports true when its job's result is stored.
func (w *Worker) resultStored(ctx context.Context, d *broker.Delivery, log *slog.Logger) bool {
	if _, err := w.broker.GetResult(ctx, d.Job.ID); err != nil {
		return false
	}
	log.Info("result already stored; acking redelivery")
	_ = d.Ack()
	return true
}

// holderState is what a claim's holder is doing, as this worker can tell.
type holderState int

const (
	holderUnknown holderState = iota // the state store could not be read
	holderRunning                    // alive and running the job
	holderAlive                      // alive, not listing the job (yet, or any more)
	holderDead
)

// awaitClaim waits while held, another attempt's claim on d's job, is
// alive: it acks d once the result is stored, and takes the claim over
// when its holder is dead or done with the job without a result.
func (w *Worker) awaitClaim(ctx context.Context, d *broker.Delivery, held broker.HeldClaim, log *slog.Logger) (*jobClaim, bool) {
	job := d.Job.ID
	var firstBeat uint64 // the holder's renewal first seen not listing the job
	seen, waiting := false, false
	for {
		if w.resultStored(ctx, d, log) {
			return nil, false
		}
		state, beat := w.holder(ctx, held, job)
		if state == holderAlive && !seen {
			firstBeat, seen = beat, true
		}
		if state == holderDead || (state == holderAlive && beat >= firstBeat+2) {
			log.Info("taking over the claim of an attempt that is over", "holder", held.Worker,
				"holder_attempt", held.Attempt, "holder_alive", state == holderAlive)
			if c, ok := w.takeOver(ctx, d, held, log); ok {
				return c, true
			}
		} else if !waiting {
			log.Info("job claimed by a live attempt; waiting for its result", "holder", held.Worker,
				"holder_attempt", held.Attempt)
			waiting = true
		}
		if !sleepCtx(ctx, claimPoll) {
			return nil, false // a hard stop: the consumer has settled d
		}
		cur, found, err := w.broker.GetClaim(ctx, job)
		switch {
		case err != nil:
			log.Debug("read claim", "err", err)
		case !found:
			// Released by its holder: claim it afresh.
			return w.claimJob(ctx, d, log)
		case cur.Revision != held.Revision:
			held, seen = cur, false
		}
	}
}

// takeOver replaces held with this worker's claim on d's job, and reports
// whether it did. It does not when another worker changed the claim first
// or the write failed: the caller reads the claim again.
func (w *Worker) takeOver(ctx context.Context, d *broker.Delivery, held broker.HeldClaim, log *slog.Logger) (*jobClaim, bool) {
	job := d.Job.ID
	if !w.enterJobWaiting(ctx, job, log) {
		return nil, false
	}
	mine, err := w.broker.TakeOverClaim(ctx, job, w.myClaim(d), held.Revision)
	if err == nil {
		return &jobClaim{w: w, job: job, held: mine}, true
	}
	w.leaveJob(job)
	if errors.Is(err, broker.ErrClaimChanged) {
		log.Info("another delivery changed the claim first", "err", err)
	} else {
		log.Warn("take over claim failed; retrying", "err", err)
	}
	return nil, false
}

// holder tells what held's holder is doing with job, and the number of its
// record's last renewal.
func (w *Worker) holder(ctx context.Context, held broker.HeldClaim, job string) (holderState, uint64) {
	if held.Instance == w.instance() {
		// This worker's own claim: it knows.
		if w.runningJob(job) {
			return holderRunning, 0
		}
		return holderDead, 0
	}
	members, err := w.store.Members(ctx, w.cfg.Keys.Claimants())
	if err != nil {
		return holderUnknown, 0
	}
	data, ok := members[held.Worker]
	if !ok {
		return holderDead, 0
	}
	var rec claimantRecord
	if err := json.Unmarshal(data, &rec); err != nil || rec.Instance != held.Instance {
		return holderDead, 0
	}
	if slices.Contains(rec.Jobs, job) {
		return holderRunning, rec.Beat
	}
	return holderAlive, rec.Beat
}

// runningJob reports whether a handler of this worker runs job.
func (w *Worker) runningJob(job string) bool {
	c := &w.claims
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobs[job] > 0
}

// enterJob lists job as running here, starting the renewal of the
// Claimants record if it was not running, and returns once the record is
// known to be live and its next renewal to list the job. It fails when the
// record could not be written lately: then no claim may be made.
func (w *Worker) enterJob(ctx context.Context, job string) error {
	c := &w.claims
	c.mu.Lock()
	if c.jobs == nil {
		c.jobs = make(map[string]int)
	}
	c.jobs[job]++
	if !c.beating {
		c.beating = true
		c.stop, c.done, c.ready = make(chan struct{}), make(chan struct{}), make(chan struct{})
		go w.renewClaimants(c.stop, c.done, c.ready)
	}
	ready := c.ready
	c.mu.Unlock()
	select {
	case <-ready:
	case <-ctx.Done():
		w.leaveJob(job)
		return ctx.Err()
	}
	c.mu.Lock()
	live := time.Since(c.lastOK) < claimTTL-claimBeat
	c.mu.Unlock()
	if !live {
		w.leaveJob(job)
		return errors.New("the claimants record could not be renewed")
	}
	return nil
}

// enterJobWaiting is enterJob, tried again every claimPoll while the
// state store cannot be written (the delivery held meanwhile, which a Nak
// would count against MaxDeliver): no claim is made that others could not
// see alive. It reports false when ctx ended first (a hard stop: the
// consumer has settled the delivery).
func (w *Worker) enterJobWaiting(ctx context.Context, job string, log *slog.Logger) bool {
	for warned := false; ; warned = true {
		err := w.enterJob(ctx, job)
		if err == nil {
			return true
		}
		if !warned {
			log.Warn("cannot list the job as running in the state store; waiting for it", "err", err)
		}
		if !sleepCtx(ctx, claimPoll) {
			return false
		}
	}
}

// leaveJob undoes one enterJob, and stops the renewal when no job is left.
// The record is left to lapse (claimTTL), so that a job starting soon after
// need not wait for a renewal.
func (w *Worker) leaveJob(job string) {
	c := &w.claims
	c.mu.Lock()
	if c.jobs[job]--; c.jobs[job] <= 0 {
		delete(c.jobs, job)
	}
	if len(c.jobs) > 0 || !c.beating {
		c.mu.Unlock()
		return
	}
	c.beating = false
	stop, done := c.stop, c.done
	c.mu.Unlock()
	close(stop)
	<-done
}

// renewClaimants renews the Claimants record every claimBeat until stop is
// closed. Its first renewal is at once, unless the record was renewed
// within claimBeat; ready is closed once that first one was tried.
func (w *Worker) renewClaimants(stop, done, ready chan struct{}) {
	defer close(done)
	c := &w.claims
	c.mu.Lock()
	next := c.lastOK.Add(claimBeat)
	c.mu.Unlock()
	if time.Until(next) > 0 {
		close(ready)
	} else {
		w.touchClaimants()
		close(ready)
		next = time.Now().Add(claimBeat)
	}
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.touchClaimants()
			t.Reset(claimBeat)
		}
	}
}

// touchClaimants writes the worker's Claimants record: its instance and
// the jobs it runs now.
func (w *Worker) touchClaimants() {
	c := &w.claims
	c.touchMu.Lock()
	defer c.touchMu.Unlock()
	c.mu.Lock()
	c.beat++
	rec := claimantRecord{Instance: w.instance(), Beat: c.beat, Jobs: make([]string, 0, len(c.jobs))}
	for job := range c.jobs {
		rec.Jobs = append(rec.Jobs, job)
	}
	c.mu.Unlock()
	data, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), claimBeat)
	defer cancel()
	start := time.Now()
	if err := w.store.Touch(ctx, w.cfg.Keys.Claimants(), w.cfg.ID, data, claimTTL); err != nil {
		w.log.Warn("renew the claimants record", "err", err)
		return
	}
	c.mu.Lock()
	c.lastOK = start
	c.mu.Unlock()
}

// storeResultHeld stores res, retrying until it is stored or ctx ends (a
// hard stop): while NATS is away the job stays listed as running here, so
// that a redelivery waits for this result instead of running the job again.
func (w *Worker) storeResultHeld(ctx context.Context, res *wire.Result, log *slog.Logger) error {
	delay := 200 * time.Millisecond
	for warned := false; ; warned = true {
		err := w.storeResult(ctx, res)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if !warned {
			log.Warn("store result failed; retrying while the job stays claimed", "err", err)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}
