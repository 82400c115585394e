package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/wire"
)

const (
	// pullExpiry is how long one pull request waits on the server for a job.
	pullExpiry = 30 * time.Second
	// ackTimeout bounds the server's confirmation of an Ack. An Ack whose
	// confirmation does not come is harmless (the result is stored first,
	// and a redelivery finds it), but the wait holds the worker's slot: a
	// server restarted under a running job never confirmed its ack, and
	// at 5s each such job left its worker idle for 5s after the outage.
	ackTimeout = time.Second
	// blobRetryDelay is the Nak delay after a transient failure to fetch a
	// job's code from the blobs store.
	blobRetryDelay = 2 * time.Second
	// panicRetryDelay is the Nak delay after a handler panicked.
	panicRetryDelay = 5 * time.Second
	// fetchBackoffMin and fetchBackoffMax bound the pause between failed pulls.
	fetchBackoffMin = 100 * time.Millisecond
	fetchBackoffMax = 5 * time.Second
)

// Consume starts a pull loop on the durable consumer wire.ConsumerName(pool)
// and returns at once. The consumer is created or updated (filter
// wire.JobSubject(pool), explicit acks, the Config's AckWait and MaxDeliver)
// and shared by every worker of the pool: each job goes to one of them.
//
// At most concurrency handlers run at once, and the loop only asks the
// server for a job when a slot is free, so a busy worker never holds jobs
// that another worker could run. Each handler runs in its own goroutine
// with a *Delivery; while it runs, the consumer sends InProgress every
// AckWait/3, so a job may run for longer than AckWait. A handler should
// settle its delivery (Ack, Nak or Term); one that returns without doing so
// gets its job Ack'd automatically. A panicking handler is recovered, logged
// with its stack, and its job Nak'd with a delay.
//
// Messages that cannot be decoded, carry an unknown wire version or a
// foreign CodeRef are Term'd with a reason and logged, never handed to
// handle. When the job's CodeRef is set, the code is fetched from the blobs
// store into Job.Code before handle is called.
//
// ctx bounds the consumer's whole life: when it ends, the consumer stops as
// Stop does with an expired context. The context given to handlers carries
// ctx's values but is cancelled only by such a hard stop.
//
// Consume is NewConsumer then Start, with ctx bounding the consumer's life
// besides its start.
func (b *Broker) Consume(ctx context.Context, pool string, concurrency int, handle func(context.Context, *Delivery)) (*Consumer, error) {
	c, err := b.NewConsumer(pool, concurrency, handle)
	return startBound(ctx, c, err)
}

// startBound starts c, just made (with err), for the life of ctx.
func startBound(ctx context.Context, c *Consumer, err error) (*Consumer, error) {
	if err == nil {
		err = c.start(ctx, true)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// NewConsumer returns the consumer that Consume starts, not started.
func (b *Broker) NewConsumer(pool string, concurrency int, handle func(context.Context, *Delivery)) (*Consumer, error) {
	if !wire.ValidPool(pool) {
		return nil, fmt.Errorf("broker: consume: invalid pool %q", pool)
	}
	if concurrency < 1 {
		return nil, fmt.Errorf("broker: consume pool %s: concurrency %d is less than 1", pool, concurrency)
	}
	if handle == nil {
		return nil, fmt.Errorf("broker: consume pool %s: nil handler", pool)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:       wire.ConsumerName(pool),
		Description:   "codexec workers of pool " + pool,
		FilterSubject: wire.JobSubject(pool),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       b.cfg.AckWait,
		MaxDeliver:    b.cfg.MaxDeliver,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
	return b.newConsumer(cfg, pool, concurrency, handle), nil
}

// ConsumeWorker is Consume for the jobs sent to one worker of pool
// (wire.WorkerSubject), on a durable consumer of the worker's own that the
// server deletes after inactive without a pull (so dead workers' consumers
// go away). Its slots are its own: each consumer keeps one pull waiting,
// and a shared slot would be held by the other's idle pull, so a worker
// consuming both may run up to the two concurrencies at once.
func (b *Broker) ConsumeWorker(ctx context.Context, pool, worker string, inactive time.Duration, concurrency int, handle func(context.Context, *Delivery)) (*Consumer, error) {
	c, err := b.NewWorkerConsumer(pool, worker, inactive, concurrency, handle)
	return startBound(ctx, c, err)
}

// NewWorkerConsumer returns the consumer that ConsumeWorker starts, not
// started.
func (b *Broker) NewWorkerConsumer(pool, worker string, inactive time.Duration, concurrency int, handle func(context.Context, *Delivery)) (*Consumer, error) {
	if !wire.ValidPool(pool) || !wire.ValidWorkerID(worker) {
		return nil, fmt.Errorf("broker: consume: invalid pool %q or worker %q", pool, worker)
	}
	if concurrency < 1 || handle == nil {
		return nil, fmt.Errorf("broker: consume worker %s: concurrency below 1 or nil handler", worker)
	}
	cfg := jetstream.ConsumerConfig{
		Durable:           wire.WorkerConsumerName(pool, worker),
		Description:       "codexec worker " + worker + " of pool " + pool,
		FilterSubject:     wire.WorkerSubject(pool, worker),
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           b.cfg.AckWait,
		MaxDeliver:        b.cfg.MaxDeliver,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: inactive,
	}
	return b.newConsumer(cfg, pool, concurrency, handle), nil
}

func (b *Broker) newConsumer(cfg jetstream.ConsumerConfig, pool string, concurrency int, handle func(context.Context, *Delivery)) *Consumer {
	return &Consumer{
		b:        b,
		cfg:      cfg,
		pool:     pool,
		handle:   handle,
		log:      b.log.With("pool", pool),
		ackWait:  b.cfg.AckWait,
		sem:      make(chan struct{}, concurrency),
		loopDone: make(chan struct{}),
		done:     make(chan struct{}),
		inflight: make(map[*Delivery]struct{}),
	}
}

// Start creates or updates the durable consumer on the server and starts
// the pull loop (see Consume); ctx bounds only the start. The contexts
// given to handlers carry ctx's values.
func (c *Consumer) Start(ctx context.Context) error { return c.start(ctx, false) }

// start is Start; with bound, ctx's end also hard-stops the consumer.
func (c *Consumer) start(ctx context.Context, bound bool) error {
	c.life.Lock()
	defer c.life.Unlock()
	if c.started || c.stopped {
		return errors.New("broker: consumer already started or stopped")
	}
	c.started = true
	cons, err := c.b.js.CreateOrUpdateConsumer(ctx, wire.JobsStream, c.cfg)
	if err != nil {
		return fmt.Errorf("broker: consume %s: %w", c.cfg.Durable, err)
	}
	c.cons = cons
	c.baseCtx = context.WithoutCancel(ctx)
	c.loopCtx, c.stopLoop = context.WithCancel(c.baseCtx)
	b := c.b
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		c.stopLoop()
		return fmt.Errorf("broker: consume pool %s: %w", c.pool, nats.ErrConnectionClosed)
	}
	b.consumers[c] = struct{}{}
	b.mu.Unlock()

	c.stopWatch = func() bool { return false }
	if bound {
		c.stopWatch = context.AfterFunc(ctx, func() { c.abort(true) })
	}
	c.running = true
	go c.loop()
	go func() {
		<-c.loopDone
		c.wg.Wait()
		c.stopWatch()
		b.mu.Lock()
		delete(b.consumers, c)
		b.mu.Unlock()
		c.closeDone()
	}()
	return nil
}

// Consumer is a pull loop on a durable consumer, started by Broker.Consume
// (or made by NewConsumer and started by Start). It keeps the lifecycle
// contract (package internal/lifecycle).
type Consumer struct {
	b       *Broker
	cfg     jetstream.ConsumerConfig
	pool    string
	cons    jetstream.Consumer // owned by the loop goroutine
	handle  func(context.Context, *Delivery)
	log     *slog.Logger
	ackWait time.Duration
	sem     chan struct{} // one token per running handler
	// idle, when set, blocks until a job may be fetched (ConsumeBatch).
	idle func(context.Context) bool

	baseCtx   context.Context // parent of handler contexts; never cancelled
	loopCtx   context.Context // cancelled to stop fetching
	stopLoop  context.CancelFunc
	stopWatch func() bool // stops the Consume ctx watch
	loopDone  chan struct{}
	done      chan struct{}
	doneOnce  sync.Once
	wg        sync.WaitGroup // running handlers

	life    sync.Mutex // over Start, and Stop's look at the state
	started bool       // Start was called
	running bool       // Start succeeded: the loop runs
	stopped bool       // Stop was called

	mu       sync.Mutex
	inflight map[*Delivery]struct{}
	aborted  bool
	abortNak bool
}

// Stop stops fetching new jobs and waits for running handlers to return.
// If ctx ends first, the contexts given to the handlers still running are
// cancelled and their jobs Nak'd, so that the server redelivers them at once
// to another worker; Stop then waits for those handlers to return, and
// returns ctx.Err(). Stop is idempotent and safe to call concurrently,
// before Start and after a failed one; calls after the consumer finished
// return nil.
func (c *Consumer) Stop(ctx context.Context) error {
	c.life.Lock()
	c.stopped = true
	running := c.running
	c.life.Unlock()
	if !running {
		c.closeDone()
		return nil
	}
	c.stopLoop()
	<-c.loopDone
	select {
	case <-c.done:
		return nil
	default:
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.abort(true)
		<-c.done
		return ctx.Err()
	}
}

func (c *Consumer) closeDone() { c.doneOnce.Do(func() { close(c.done) }) }

// Done is closed once the consumer has stopped fetching and every handler
// it started has returned (or, for one that never ran, once Stop is
// called).
func (c *Consumer) Done() <-chan struct{} { return c.done }

// abort stops the loop and settles every in-flight delivery, then cancels
// its handler's context: with a Nak when nak is set (the connection still
// works), else by abandoning it to AckWait. Settling before cancelling
// makes sure no handler returning early gets its job auto-Ack'd.
func (c *Consumer) abort(nak bool) {
	c.stopLoop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.aborted {
		c.aborted, c.abortNak = true, nak
	}
	for d := range c.inflight {
		c.abandon(d)
	}
}

// abandon settles d on behalf of a stopping consumer and cancels its
// handler. Called with c.mu held.
func (c *Consumer) abandon(d *Delivery) {
	if d.settle() && c.abortNak {
		if err := d.msg.Nak(); err != nil {
			c.log.Warn("nak on stop", "job_id", d.jobID(), "err", err)
		}
	}
	d.cancel()
}

// loop fetches one job per free slot until stopped.
func (c *Consumer) loop() {
	defer close(c.loopDone)
	backoff := fetchBackoffMin
	for {
		select {
		case c.sem <- struct{}{}:
		case <-c.loopCtx.Done():
			return
		}
		if c.idle != nil && !c.idle(c.loopCtx) {
			<-c.sem
			return
		}
		msg, err := c.fetch()
		if c.loopCtx.Err() != nil {
			if msg != nil {
				// Arrived as we stopped: give it straight back.
				if nerr := msg.Nak(); nerr != nil {
					c.log.Warn("nak on stop", "err", nerr)
				}
			}
			<-c.sem
			return
		}
		if msg != nil {
			backoff = fetchBackoffMin
			c.wg.Add(1)
			go c.run(msg)
			continue
		}
		<-c.sem
		if err == nil {
			continue // the pull expired empty
		}
		switch {
		case errors.Is(err, nats.ErrConnectionClosed):
			c.abort(false)
			return
		case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerNotFound),
			errors.Is(err, nats.ErrNoResponders):
			// The consumer was deleted, or lost with its server's storage
			// (no responders on its pull subject): put it back. The
			// backoff below keeps a JetStream outage from becoming a busy loop.
			c.log.Warn("consumer gone, recreating", "consumer", c.cfg.Durable, "err", err)
			if cons, cerr := c.b.js.CreateOrUpdateConsumer(c.loopCtx, wire.JobsStream, c.cfg); cerr == nil {
				c.cons = cons
			} else {
				c.log.Warn("recreate consumer", "consumer", c.cfg.Durable, "err", cerr)
			}
		default:
			c.log.Debug("pull failed", "err", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-c.loopCtx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, fetchBackoffMax)
	}
}

// fetch asks the server for one job. It returns (nil, nil) when the pull
// expired without one.
func (c *Consumer) fetch() (jetstream.Msg, error) {
	ctx, cancel := context.WithTimeout(c.loopCtx, pullExpiry)
	defer cancel()
	batch, err := c.cons.Fetch(1, jetstream.FetchContext(ctx))
	if err != nil {
		return nil, err
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg != nil {
		return msg, nil
	}
	err = batch.Error()
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = nil
	}
	return nil, err
}

// run handles one message in its own goroutine and releases its slot.
func (c *Consumer) run(msg jetstream.Msg) {
	defer c.wg.Done()
	defer func() { <-c.sem }()

	ctx, cancel := context.WithCancel(c.baseCtx)
	defer cancel()
	d := &Delivery{msg: msg, cancel: cancel}
	if md, err := msg.Metadata(); err == nil {
		d.Attempt = int(md.NumDelivered)
	}
	job, reason := decodeJob(msg.Data())
	if reason != "" {
		c.log.Error("terminating undecodable job", "subject", msg.Subject(), "reason", reason, "attempt", d.Attempt)
		if err := d.Term(reason); err != nil {
			c.log.Warn("term", "err", err)
		}
		return
	}
	// Set before d is shared: abort and the heartbeat read d.Job.ID.
	d.Job = job
	if !c.track(d) {
		return
	}
	defer c.untrack(d)
	defer c.heartbeat(d)()

	if job.CodeRef != "" {
		if !c.resolveCode(ctx, d, job) {
			return
		}
		d.codeBlob, d.blobs, d.log = job.CodeRef, c.b.blobs, c.log
	}
	c.call(ctx, d)
	if !d.isSettled() {
		if err := d.Ack(); err != nil && !errors.Is(err, errSettled) {
			c.log.Warn("auto-ack", "job_id", job.ID, "err", err)
		}
	}
}

// track registers d as in flight, or settles it at once when the consumer
// is stopping. It reports whether d should run.
func (c *Consumer) track(d *Delivery) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.aborted {
		c.abandon(d)
		return false
	}
	c.inflight[d] = struct{}{}
	return true
}

func (c *Consumer) untrack(d *Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.inflight, d)
}

// heartbeat sends InProgress every AckWait/3 until d is settled or the
// returned stop function is called.
func (c *Consumer) heartbeat(d *Delivery) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(max(c.ackWait/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				if d.isSettled() {
					return
				}
				if err := d.msg.InProgress(); err != nil {
					c.log.Debug("in progress", "job_id", d.jobID(), "err", err)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// decodeJob returns the job in data, or a reason to terminate it.
func decodeJob(data []byte) (*wire.Job, string) {
	var job wire.Job
	if err := json.Unmarshal(data, &job); err != nil {
		return nil, fmt.Sprintf("broker: undecodable job: %v", err)
	}
	if job.V != wire.Version {
		return nil, fmt.Sprintf("broker: job %q: %v %d", job.ID, wire.ErrBadVersion, job.V)
	}
	if !idRe.MatchString(job.ID) {
		return nil, fmt.Sprintf("broker: job has an invalid id %q", job.ID)
	}
	if job.CodeRef != "" && job.CodeRef != jobBlobName(job.ID) {
		return nil, fmt.Sprintf("broker: job %s: foreign code ref %q", job.ID, job.CodeRef)
	}
	return &job, ""
}

// resolveCode fetches the job's code from the blobs store. On failure it
// settles the delivery (Term when the blob is gone, Nak otherwise) and
// reports false.
func (c *Consumer) resolveCode(ctx context.Context, d *Delivery, job *wire.Job) bool {
	code, err := c.b.blobs.GetBytes(ctx, job.CodeRef)
	switch {
	case err == nil:
		job.Code = string(code)
		return true
	case ctx.Err() != nil:
		// Hard stop: abort has already settled the delivery.
		return false
	case errors.Is(err, jetstream.ErrObjectNotFound) && c.hasResult(ctx, job.ID):
		// A copy of a job already done (a redelivery whose first run
		// stored its result and dropped the code, or the pool's copy of a
		// targeted job): nothing left to do.
		c.log.Info("code blob gone, result stored; acking", "job_id", job.ID)
		if aerr := d.Ack(); aerr != nil {
			c.log.Warn("ack", "job_id", job.ID, "err", aerr)
		}
	case errors.Is(err, jetstream.ErrObjectNotFound):
		reason := fmt.Sprintf("broker: job %s: code blob %s not found (expired?)", job.ID, job.CodeRef)
		c.log.Error("terminating job without code", "job_id", job.ID, "blob", job.CodeRef)
		if terr := d.Term(reason); terr != nil {
			c.log.Warn("term", "job_id", job.ID, "err", terr)
		}
	default:
		c.log.Warn("fetch job code, will retry", "job_id", job.ID, "blob", job.CodeRef, "err", err)
		if nerr := d.Nak(blobRetryDelay); nerr != nil {
			c.log.Warn("nak", "job_id", job.ID, "err", nerr)
		}
	}
	return false
}

// hasResult reports whether jobID has a stored result (false when that
// cannot be told).
func (c *Consumer) hasResult(ctx context.Context, jobID string) bool {
	_, err := c.b.results.Get(ctx, jobID)
	return err == nil
}

// call runs the handler, turning a panic into a logged, delayed Nak.
func (c *Consumer) call(ctx context.Context, d *Delivery) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("handler panicked", "job_id", d.Job.ID, "attempt", d.Attempt,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			if err := d.Nak(panicRetryDelay); err != nil && !errors.Is(err, errSettled) {
				c.log.Warn("nak after panic", "job_id", d.Job.ID, "err", err)
			}
		}
	}()
	c.handle(ctx, d)
}

// errSettled is returned by a Delivery method called after the delivery was
// already settled, by the handler or by a stopping consumer.
var errSettled = fmt.Errorf("broker: delivery already settled: %w", jetstream.ErrMsgAlreadyAckd)

// Delivery is one delivery of a job to a handler. Settle it with exactly
// one of Ack, Nak or Term; later calls return an error wrapping
// jetstream.ErrMsgAlreadyAckd. A handler that returns without settling gets
// its job Ack'd automatically.
type Delivery struct {
	// Job is the decoded job, its code resolved from the blobs store.
	Job *wire.Job
	// Attempt is the delivery count of the job, 1 for the first delivery.
	Attempt int

	msg    jetstream.Msg
	cancel context.CancelFunc

	// codeBlob is the blob the job's code came from ("" when it came in
	// the message), which Ack deletes from blobs: once the job is done
	// nothing reads it again, and keeping it until the bucket's TTL held
	// every large job's code on the server for Retention.
	codeBlob string
	blobs    jetstream.ObjectStore
	log      *slog.Logger

	mu      sync.Mutex
	settled bool
}

// settle marks d settled and reports whether it was not already.
func (d *Delivery) settle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return false
	}
	d.settled = true
	return true
}

func (d *Delivery) isSettled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled
}

func (d *Delivery) jobID() string {
	if d.Job != nil {
		return d.Job.ID
	}
	return ""
}

// Ack acknowledges the job: it is done and leaves the stream, and the
// blob its code came from, if any, is deleted. Ack waits (up to 1s) for
// the server to confirm, so an error means the job may be delivered again;
// PutResult's create-only write keeps that harmless.
func (d *Delivery) Ack() error {
	if !d.settle() {
		return errSettled
	}
	ctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
	defer cancel()
	if err := d.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("broker: ack job %s: %w", d.jobID(), err)
	}
	if d.codeBlob != "" {
		// Best effort: a blob left behind expires with the bucket's TTL. A
		// redelivery that finds it gone and the result stored is acked
		// (resolveCode).
		if err := d.blobs.Delete(ctx, d.codeBlob); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			d.log.Warn("delete job code blob", "job_id", d.jobID(), "blob", d.codeBlob, "err", err)
		}
	}
	return nil
}

// Nak gives the job back for redelivery after delay (at once when delay
// is 0), to any worker of the pool, counting one more attempt against
// MaxDeliver. Use it for failures worth retrying.
func (d *Delivery) Nak(delay time.Duration) error {
	if !d.settle() {
		return errSettled
	}
	var err error
	if delay > 0 {
		err = d.msg.NakWithDelay(delay)
	} else {
		err = d.msg.Nak()
	}
	if err != nil {
		return fmt.Errorf("broker: nak job %s: %w", d.jobID(), err)
	}
	return nil
}

// Term removes the job for good, with a reason that the server publishes in
// its MSG_TERMINATED advisory. Use it for jobs that can never succeed.
func (d *Delivery) Term(reason string) error {
	if !d.settle() {
		return errSettled
	}
	var err error
	if reason != "" {
		err = d.msg.TermWithReason(reason)
	} else {
		err = d.msg.Term()
	}
	if err != nil {
		return fmt.Errorf("broker: term job %s: %w", d.jobID(), err)
	}
	return nil
}
