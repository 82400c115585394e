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
//   - dead: a record of another instance (a restart under the same id), or
//     no record while this worker's view of the store is steady (below);
//   - alive but done with the job without a result (a claim left behind):
//     two renewals of its record after the claim was read still do not list
//     the job. Renewals are written one at a time, in order, so the second
//     one was taken after the claim was read.
// A state store that cannot be read tells nothing: the delivery waits.
//
// The store is not needed to start a job, only to take one over. A
// delivery whose create-only claim wins runs at once even when the
// Claimants record cannot be written (Redis down): the claim in JetStream
// is the exclusion, and the record is written as soon as the store answers
// again (renewals are retried every claimPoll while they fail). While only
// Redis is away nothing is redelivered (the holder keeps its lease through
// NATS), so nobody judges the holder. When it is judged, after an outage,
// its record may be missing only because it expired meanwhile or was lost
// with a restarted Redis, and its holder has not renewed it yet. So a
// missing record means "dead" only when this worker's view of the store is
// steady: no store failure seen here (reads of holders, renewals of its
// own records, presence heartbeats) within claimTTL, and its reads dense,
// none more than claimBeat after the previous one, for claimBeat; else the
// holder is unknown and the delivery waits. A take over (judging the holder
// dead) still needs this worker's own record written.
//
// What remains: a holder cut off from both Redis and NATS while alive (a
// partition of its host, or both restarting at once with the holder's
// record lost and a worker that saw no failure judging before the holder's
// next renewal) cannot be told from a dead one, and its job may start again
// elsewhere while its first run goes on. The result stored first wins.

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
	failing bool           // whether the last renewal failed
	beating bool
	stop    chan struct{} // stops the renewal loop
	done    chan struct{} // closed when the renewal loop has returned
	ready   chan struct{} // closed once the loop's first renewal was tried

	touchMu sync.Mutex // renewals are written one at a time, in order

	view storeView // this worker's view of the state store's health
}

// storeView is what a worker saw of the state store lately: when a store
// operation last failed, and since when they have been answered densely.
// Its zero value has seen nothing, which is not steady.
type storeView struct {
	mu       sync.Mutex
	failedAt time.Time // the last failure seen
	okAt     time.Time // the last answer seen
	okSince  time.Time // the first of the answers since, none more than claimBeat after the previous
}

// note records the outcome of one store operation.
func (v *storeView) note(err error) {
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err != nil {
		v.failedAt = now
		v.okSince = time.Time{}
		return
	}
	if v.okSince.IsZero() || now.Sub(v.okAt) > claimBeat {
		v.okSince = now
	}
	v.okAt = now
}

// steady reports whether no failure was seen within claimTTL and the
// store has answered densely for claimBeat: then a holder alive and able
// to reach the store has renewed its record since any outage, so a missing
// record is a dead holder's.
func (v *storeView) steady() bool {
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	return now.Sub(v.failedAt) >= claimTTL && !v.okSince.IsZero() && now.Sub(v.okSince) >= claimBeat
}

// failedWithin reports whether a failure was seen within d.
func (v *storeView) failedWithin(d time.Duration) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return time.Since(v.failedAt) < d
}

// noteStore records the outcome of one state store operation in the
// worker's view of the store (storeView).
func (w *Worker) noteStore(err error) { w.claims.view.note(err) }

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
	// confirmed: confirm ran (once per attempt); superseded: it found the
	// claim taken over by another attempt.
	confirmed, superseded bool
	// life is the handler's context, which a cancel or a revocation of
	// the job does not end: confirmClaim runs under it, since the attempt
	// of a cancelled job saves its files and stores its result too.
	life context.Context
}

type claimKey struct{}

// withClaim returns ctx carrying c, for confirmClaim.
func withClaim(ctx context.Context, c *jobClaim) context.Context {
	return context.WithValue(ctx, claimKey{}, c)
}

// confirmClaim confirms the claim that ctx carries (broker.ConfirmClaim),
// once: it runs when the job's attempt has finished, before the session's
// files are saved and the result stored. It reports false when another
// worker took the job over meanwhile (this worker was stopped or cut off
// long enough to be judged dead): that attempt's files and result are the
// session's, and this one must write neither. Failures other than a
// changed claim are retried while ctx lasts (NATS away); a ctx that ends
// first leaves the attempt to go on as before.
func (w *Worker) confirmClaim(ctx context.Context, log *slog.Logger) bool {
	c, _ := ctx.Value(claimKey{}).(*jobClaim)
	if c == nil {
		return true
	}
	if c.confirmed {
		return !c.superseded
	}
	if c.life != nil {
		ctx = c.life // not the job's context, which a cancel ends
	}
	delay := 200 * time.Millisecond
	for warned := false; ; warned = true {
		held, err := w.broker.ConfirmClaim(ctx, c.job, c.held)
		if err == nil {
			c.held, c.confirmed = held, true
			return true
		}
		if errors.Is(err, broker.ErrClaimChanged) {
			c.confirmed, c.superseded = true, true
			log.Warn("another worker took this job over while it ran here (this worker was judged dead); "+
				"its files and result are kept, this attempt's are not", "err", err)
			return false
		}
		if !warned {
			log.Warn("confirm claim failed; retrying while the job stays claimed", "err", err)
		}
		if !sleepCtx(ctx, delay) {
			return true
		}
		delay = min(2*delay, 2*time.Second)
	}
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
// result is stored, or by a stopping consumer. A claim that wins runs even
// while the state store is down (the renewal writes the record once it is
// back). Failures of the claims bucket, and of the store when the claim
// is to be taken over, are waited out, the delivery held: a Nak would
// spend one of the job's deliveries (MaxDeliver) on each.
func (w *Worker) claimJob(ctx context.Context, d *broker.Delivery, log *slog.Logger) (*jobClaim, bool) {
	job := d.Job.ID
	// Only a redelivery can find a result, so a first delivery skips the
	// lookup.
	if d.Attempt > 1 && w.resultStored(ctx, d, log) {
		return nil, false
	}
	for warned := false; ; warned = true {
		if err := w.enterJob(ctx, job); err != nil {
			return nil, false // a hard stop: the consumer has settled d
		}
		held, won, err := w.broker.ClaimJob(ctx, job, w.myClaim(d))
		if err == nil && won {
			return &jobClaim{w: w, job: job, held: held, life: ctx}, true
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
		return &jobClaim{w: w, job: job, held: mine, life: ctx}, true
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
	w.noteStore(err)
	if err != nil {
		return holderUnknown, 0
	}
	data, ok := members[held.Worker]
	if !ok {
		if !w.claims.view.steady() {
			// It may have expired, or been lost, during an outage this
			// worker saw or may have missed, its holder yet to renew it.
			return holderUnknown, 0
		}
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
// Claimants record if it was not running, and returns once a renewal was
// tried since (the next one lists the job). It fails only when ctx ends.
// The record may not be live: the state store may be down. A claim made
// then is still exclusive (create-only in JetStream); others judge it by
// the record once the store is back (claimTTL's steadiness rule).
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
	if w.claims.view.failedWithin(claimBeat) {
		return nil // the store is down: the renewal may take its timeout to fail
	}
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		w.leaveJob(job)
		return ctx.Err()
	}
}

// enterLiveJob is enterJob that fails, the job left, when the Claimants
// record could not be written lately: a take over needs it, so that the
// claim it writes is seen alive.
func (w *Worker) enterLiveJob(ctx context.Context, job string) error {
	if err := w.enterJob(ctx, job); err != nil {
		return err
	}
	c := &w.claims
	c.mu.Lock()
	live := time.Since(c.lastOK) < claimTTL-claimBeat
	c.mu.Unlock()
	if !live {
		w.leaveJob(job)
		return errors.New("the claimants record could not be renewed")
	}
	return nil
}

// enterJobWaiting is enterLiveJob, tried again every claimPoll while the
// state store cannot be written (the delivery held meanwhile, which a Nak
// would count against MaxDeliver): no claim is taken over that others
// could not see alive. It reports false when ctx ended first (a hard stop:
// the consumer has settled the delivery).
func (w *Worker) enterJobWaiting(ctx context.Context, job string, log *slog.Logger) bool {
	for warned := false; ; warned = true {
		err := w.enterLiveJob(ctx, job)
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

// renewClaimants renews the Claimants record every claimBeat, or every
// claimPoll while renewals fail (so that the record is back soon after the
// store is), until stop is closed. Its first renewal is at once, unless the
// record was renewed within claimBeat; ready is closed once that first one
// was tried.
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
			if w.touchClaimants() {
				t.Reset(claimBeat)
			} else {
				t.Reset(claimPoll)
			}
		}
	}
}

// touchClaimants writes the worker's Claimants record: its instance and
// the jobs it runs now. It reports whether the write succeeded.
func (w *Worker) touchClaimants() bool {
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
	err := w.store.Touch(ctx, w.cfg.Keys.Claimants(), w.cfg.ID, data, claimTTL)
	w.noteStore(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if !c.failing {
			w.log.Warn("renew the claimants record: the jobs claimed here run on; retrying", "every", claimPoll, "err", err)
		}
		c.failing = true
		return false
	}
	if c.failing {
		w.log.Info("claimants record renewed again")
	}
	c.lastOK, c.failing = start, false
	return true
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
