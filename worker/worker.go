package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/internal/lifecycle"
	"github.com/codexec/codexec/internal/telemetry"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
)

// Worker runs jobs for one pool. It keeps the lifecycle contract (package
// internal/lifecycle): Start it once; a Start that fails has closed what it
// opened; Stop is idempotent, safe before Start and after a failed Start.
type Worker struct {
	cfg    Config
	broker *broker.Broker
	store  statestore.Store
	log    *slog.Logger
	// auditTenants are the tenants whose audit key is known recorded (audit.go).
	auditTenants sync.Map
	resultBytes  resultBytes    // result bytes per tenant and hour, as written (resultbytes.go)
	workdirs     workdirReports // what the sessions' directories took, as last reported (workdir_bytes.go)
	auditQ       auditQueue     // audit records on their way to the state store (audit.go)

	python     string // the default environment's interpreter
	venvDir    string
	childExtra map[string]string // variables set in every job's environment
	exec       runner.Executor   // how jobs run, chosen at Start: spawn, fresh or pool
	scripts    scriptFiles       // the jobs' scripts, their files reused within a session
	pool       *runner.Pool      // warm interpreters; nil in spawn mode
	cache      *envcache.Cache   // built environments
	caps       envspec.Capabilities
	load       atomic.Int64 // jobs running
	started    time.Time    // when Start began, for the presence record
	targeted   *broker.Consumer
	batch      *broker.Consumer // batch jobs, in idle slots (batch.go)
	workspaces scopeLocks       // one restore or snapshot of a session's directory at a time (workspaces.go)
	// checkedCopies are the scopes whose copy this process has checked
	// against its last save, or restored (copyIntact).
	checkedCopies sync.Map
	uses          scopeUses // the scopes jobs use, against collections (collect.go)

	// revocations are the operator's, against the jobs that run (revoke.go).
	revocations revocationWatch

	// contexts are the sessions' live interpreters (contexts.go).
	contexts *contextHost

	// The sandbox, when the worker has one (setupSandbox): bubblewrap, the
	// sessions' uids, the job cgroups (nil without cgroups).
	box        *sandbox.Sandbox
	uids       *sandbox.UIDs
	cgroups    *cgroup.Manager
	cgroupPool *cgroupPool
	fresh      *runner.Fresh // spawn mode in a sandbox: interpreters started ahead of time
	sandboxCfg *runner.SandboxConfig
	sessionFS  *sessionFS // the sessions' own file systems; nil: their disk limit is measured
	gpus       *gpuState  // the GPUs offered to jobs (gpus.go); nil: none

	bg       sync.WaitGroup // goroutines of Start's (warming the default zygote)
	stopBeat context.CancelFunc
	beatDone chan struct{}
	claims   claimants // the jobs claimed here, and their liveness (claim.go)
	beatOnce sync.Once // stops the heartbeat

	mu          sync.Mutex
	consumer    *broker.Consumer
	startCalled bool
	stopped     bool
	stopDone    chan struct{} // closed when the first Stop has finished
	releaseOnce sync.Once     // closes what Start opened, once
	health      readiness     // what the readiness check reads (telemetry.go)

	// stopExhausted ends the subscription to jobs whose deliveries ran
	// out (exhausted.go); under mu.
	stopExhausted func()
}

// New checks cfg and returns a Worker that is not yet consuming.
func New(cfg Config, b *broker.Broker, st statestore.Store) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	// Unbuffered output, so what a job printed before a timeout killed it is
	// still shown. Operator settings win.
	// matplotlib draws with Agg, which needs no display, so that a job's
	// figures come back as pictures (display.go). Set here, in every job's
	// environment and so in the warm zygote's, not per job: a variable that
	// differs from the zygote's makes the job miss it and run cold.
	extra := map[string]string{"PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
	for k, v := range cfg.EnvSet {
		extra[k] = v
	}
	return &Worker{cfg: cfg, broker: b, store: st, childExtra: extra, exec: runner.Spawn{},
		stopDone: make(chan struct{}), log: cfg.Logger.With("worker", cfg.ID, "pool", cfg.Pool)}, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start prepares the default environment (building the venv on first use),
// announces the worker and starts consuming jobs. It returns once the worker
// is ready to run jobs. When it fails, it has closed what it had opened
// (sandbox cgroups, interpreters, cache, heartbeat) and withdrawn the
// presence it may have announced.
func (w *Worker) Start(ctx context.Context) (err error) {
	w.mu.Lock()
	if w.startCalled || w.stopped {
		w.mu.Unlock()
		return errors.New("worker: Start called twice, or after Stop")
	}
	w.startCalled = true
	w.mu.Unlock()
	announced := false
	defer func() {
		if err == nil {
			return
		}
		w.release()
		if announced {
			w.leave(ctx)
		}
	}()

	w.started = time.Now().UTC()
	w.capOpenFiles()
	w.capProcesses()
	for _, dir := range []string{w.cfg.DataDir, w.sessionsRoot(), w.cfg.ScriptsDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if err := w.setupSandbox(ctx); err != nil {
		return err
	}
	if err := w.setupGPUs(ctx); err != nil {
		return err
	}
	w.setupSessionFS(ctx) // before any interpreter starts: they see its mounts
	w.startCollections(ctx)
	if err := w.prepareEnv(ctx); err != nil {
		return err
	}
	if err := w.openEnvCache(ctx); err != nil {
		return err
	}
	if err := w.startExecutor(ctx); err != nil {
		return err
	}
	w.prestartGPUs()
	if err := w.heartbeat(ctx); err != nil {
		return fmt.Errorf("worker: announce presence: %w", err)
	}
	announced = true
	beatCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.stopBeat, w.beatDone = cancel, make(chan struct{})
	go w.heartbeatLoop(beatCtx)

	if err := w.startContexts(); err != nil {
		return fmt.Errorf("worker: contexts: %w", err)
	}
	w.startRevocations(ctx) // before the first job is taken
	c, err := w.broker.Consume(ctx, w.cfg.Pool, w.cfg.Concurrency, w.handle)
	if err != nil {
		return fmt.Errorf("worker: consume: %w", err)
	}
	// The worker's own subject, for jobs placement sent to it because it
	// holds their environment. Its consumer is deleted by the server once
	// the worker has stopped pulling for a while.
	var tc *broker.Consumer
	if wire.ValidWorkerID(w.cfg.ID) {
		tc, err = w.broker.ConsumeWorker(ctx, w.cfg.Pool, w.cfg.ID, time.Minute, w.cfg.Concurrency, w.handle)
		if err != nil {
			w.log.Warn("no targeted consumer: jobs reach this worker through its pool only", "err", err)
			tc = nil
		}
	}
	w.mu.Lock()
	w.consumer, w.targeted = c, tc
	w.mu.Unlock()
	if tc != nil {
		_ = w.heartbeat(ctx) // advertise Targeted
	}
	w.startBatch(ctx)
	w.startExhausted()
	w.health.started.Store(true)
	w.log.Info("worker ready", "python", w.python, "concurrency", w.cfg.Concurrency, "exec_mode", w.cfg.ExecMode)
	return nil
}

// startExecutor chooses, once, how this worker's jobs run: forked from
// warm interpreters (a Pool), in a sandboxed interpreter of their own
// started ahead of time (Fresh), or in a plain new one (Spawn, the
// default set by New).
func (w *Worker) startExecutor(ctx context.Context) error {
	switch {
	case w.cfg.ExecMode == ExecZygote:
		w.pool = runner.NewPool(runner.PoolConfig{
			Preload: w.cfg.Preload, MaxZygotes: w.cfg.MaxZygotes, IdleTimeout: w.cfg.ZygoteIdle,
			Logger: w.log.With("part", "zygote"), Sandbox: w.sandboxCfg,
		})
		if err := w.pool.Start(ctx); err != nil {
			return fmt.Errorf("worker: zygotes: %w", err)
		}
		w.exec = w.pool
		// Warm the default environment now, so that its first jobs need not
		// start an interpreter; until it is ready they do.
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			_ = w.pool.Warm(context.WithoutCancel(ctx), w.spec("", "", ""))
			w.health.warmed.Store(true)
		}()
	case w.sandboxCfg != nil:
		w.fresh = runner.NewFresh(w.sandboxCfg, w.log.With("part", "sandbox"))
		if err := w.fresh.Start(ctx); err != nil {
			return fmt.Errorf("worker: sandbox: %w", err)
		}
		w.exec = w.fresh
	}
	return nil
}

func (w *Worker) prepareEnv(ctx context.Context) error {
	if w.cfg.VenvPath != "" {
		py, err := envcache.ExistingVenv(w.cfg.VenvPath)
		if err != nil {
			return fmt.Errorf("worker: default environment: %w", err)
		}
		dir, err := filepath.Abs(w.cfg.VenvPath)
		if err != nil {
			return fmt.Errorf("worker: default environment: %w", err)
		}
		w.python, w.venvDir = py, dir
		return nil
	}
	base, err := envcache.ResolvePython(w.cfg.Python)
	if err != nil {
		return fmt.Errorf("worker: default interpreter: %w", err)
	}
	// The directory names the interpreter, so changing --python builds a
	// new venv instead of silently reusing the old one.
	sum := sha256.Sum256([]byte(base))
	dir := filepath.Join(w.cfg.DataDir, "envs", "default-"+hex.EncodeToString(sum[:4]))
	w.log.Info("preparing default environment", "venv", dir, "from", base)
	py, err := envcache.EnsureVenv(ctx, dir, base)
	if err != nil {
		return fmt.Errorf("worker: default environment: %w", err)
	}
	w.python, w.venvDir = py, dir
	return nil
}

// Stop stops taking jobs, waits for running ones until ctx ends (then
// cancels them and hands their jobs back to the queue), closes what Start
// opened and withdraws the worker's presence. It is idempotent and safe in
// any state; a second call waits for the first (or for its own ctx).
//
// The presence is withdrawn first, before the running jobs end: placement
// sends no more jobs to this worker's own subject, and frontends waiting on
// one it had been sent send it to the pool.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return lifecycle.Wait(ctx, w.stopDone)
	}
	w.stopped = true
	w.health.started.Store(false) // not ready from now on
	c, tc := w.consumer, w.targeted
	w.mu.Unlock()
	defer close(w.stopDone)
	w.stopHeartbeat()
	w.stopExhaustedJobs()
	w.leave(ctx)
	waitBatch := w.stopBatch(ctx)
	var err error
	if tc != nil {
		go func() { _ = tc.Stop(ctx) }()
	}
	if c != nil {
		err = c.Stop(ctx)
		// Done, not Stop's return: after a hard stop, jobs may still be
		// on their way out of their zygote.
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
		}
	}
	if tc != nil {
		select {
		case <-tc.Done():
		case <-time.After(5 * time.Second):
		}
	}
	waitBatch()
	w.auditQ.flush()
	w.flushResultBytes()
	w.stopContexts()
	w.release()
	return err
}

// stopHeartbeat stops the heartbeat loop and waits for it; idempotent.
func (w *Worker) stopHeartbeat() {
	w.beatOnce.Do(func() {
		if w.stopBeat != nil {
			w.stopBeat()
			<-w.beatDone
		}
	})
}

// release closes, once, what Start opened: the heartbeat, the executor's
// interpreters, the environment cache and the job cgroups. Jobs must be
// over (or their consumers stopped) first.
func (w *Worker) release() {
	w.releaseOnce.Do(func() {
		w.stopHeartbeat()
		w.stopContexts()
		stopCtx := context.Background() // what runs in them is over: nothing to wait for
		if w.pool != nil {
			if err := w.pool.Stop(stopCtx); err != nil {
				w.log.Warn("zygotes not stopped", "err", err)
			}
		}
		if w.fresh != nil {
			if err := w.fresh.Stop(stopCtx); err != nil {
				w.log.Warn("sandboxed interpreters not stopped", "err", err)
			}
		}
		w.stopGPUs()
		w.bg.Wait()
		if w.cache != nil {
			_ = w.cache.Close()
		}
		w.closeCgroups()
		w.stopCollections()
		w.stopRevocations()
		if w.sessionFS != nil {
			w.sessionFS.close()
		}
	})
}

// leave withdraws the worker's presence record.
func (w *Worker) leave(ctx context.Context) {
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := w.store.Leave(leaveCtx, w.cfg.Keys.Workers(), w.cfg.ID); err != nil {
		w.log.Warn("withdraw presence", "err", err)
	}
}

func (w *Worker) heartbeat(ctx context.Context) error {
	host, _ := os.Hostname()
	wi := envspec.Advert{
		V: wire.Version, WorkerID: w.cfg.ID, Pool: w.cfg.Pool, Host: host,
		Concurrency: w.cfg.Concurrency, Python: w.python, StartedAt: w.started,
		Load: int(w.load.Load()),
	}
	if w.cache != nil {
		wi.Capabilities = w.caps
		wi.Envs = w.cache.Held()
	}
	if w.pool != nil {
		wi.Warm = w.pool.WarmCount()
	}
	w.advertiseGPUs(&wi)
	w.mu.Lock()
	wi.Targeted = w.targeted != nil
	w.mu.Unlock()
	info, _ := json.Marshal(wi)
	return w.store.Touch(ctx, w.cfg.Keys.Workers(), w.cfg.ID, info, 3*w.cfg.HeartbeatInterval)
}

// heartbeatLoop renews the worker's presence every HeartbeatInterval. A
// failed renewal (the state store unreachable) changes nothing else: the
// worker keeps consuming jobs, which reach it through the queue. It is
// retried every heartbeatRetry until it works again, so that the presence
// is back at once when the store is, even after the record expired.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	defer close(w.beatDone)
	t := time.NewTimer(w.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.gpuChanged():
			t.Stop()
		}
		err := w.beat(ctx)
		w.noteStore(err) // claims judge holders by how steady the store looks (claim.go)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			if !failing {
				w.log.Warn("heartbeat failed: the worker still runs jobs from the queue; retrying", "every", heartbeatRetry(w.cfg.HeartbeatInterval), "err", err)
			}
			failing = true
			t.Reset(heartbeatRetry(w.cfg.HeartbeatInterval))
		default:
			if failing {
				w.log.Info("heartbeat restored: presence announced again")
			}
			failing = false
			t.Reset(w.cfg.HeartbeatInterval)
		}
	}
}

// beat is one heartbeat, bounded by the interval so that an unresponsive
// store cannot hold the loop.
func (w *Worker) beat(ctx context.Context) error {
	bctx, cancel := context.WithTimeout(ctx, w.cfg.HeartbeatInterval)
	defer cancel()
	return w.heartbeat(bctx)
}

// heartbeatRetry is how soon a failed heartbeat is tried again: a second,
// or the interval when that is shorter.
func heartbeatRetry(interval time.Duration) time.Duration {
	return min(interval, time.Second)
}

func (w *Worker) sessionsRoot() string { return filepath.Join(w.cfg.DataDir, "sessions") }

// handle runs one delivery to completion: result stored, message acked.
// A job runs once per live claim (claim.go): a delivery whose job is done
// is acked, one whose job another live attempt runs waits for that
// attempt's result, and one whose first attempt is over without a result
// takes the job over.
func (w *Worker) handle(ctx context.Context, d *broker.Delivery) {
	job := d.Job
	log := jobLogger(w.log, job, d.Attempt)
	tDelivered := time.Now()
	watch := w.startCancelWatch(ctx, job, log)
	claim, ok := w.claimJob(ctx, d, log)
	if !ok {
		watch.stop()
		return
	}
	defer claim.end()

	tStart := time.Now()
	span := w.startJobSpan(job)
	defer span.End()
	jctx, stopWatch, cancelled := watch.await(ctx, w, job, log)
	defer stopWatch()
	jctx, stopRevokedWatch, revokedAt, revoked := w.watchRevoked(jctx, job)
	defer stopRevokedWatch()
	jctx = withClaim(jctx, claim)
	var res *wire.Result
	if cancelled {
		if at, ok := w.revokedNow(ctx, job); ok {
			log.Info("job of a revoked identity cancelled before it started; not running it", "revoked", at)
			res = w.revokedResult(job, d.Attempt, at)
		} else {
			log.Info("job cancelled before it started; not running it")
			res = w.cancelledResult(job, d.Attempt)
		}
	} else if revoked {
		log.Info("job of a revoked identity; not running it", "revoked", revokedAt)
		res = w.revokedResult(job, d.Attempt, revokedAt)
	} else {
		log.Info("job started", "scope", job.Scope, "kind", job.Kind, "env", job.EnvID)
		w.load.Add(1)
		running := telemetry.JobStarted(w.cfg.Pool)
		res = w.run(jctx, job, d.Attempt, log)
		running()
		w.load.Add(-1)
		if jobCancelled(jctx) {
			if _, ok := w.revokedNow(ctx, job); ok {
				log.Info("job of a revoked identity cancelled")
				markRevoked(res, job)
			} else {
				markCancelled(res)
			}
		} else if jobRevoked(jctx) {
			log.Info("job of a revoked identity stopped")
			markRevoked(res, job)
		}
	}
	if ctx.Err() != nil && res.Status != wire.StatusOK && res.Status != wire.StatusError {
		// The worker is stopping hard: the consumer hands the job back,
		// and the claim goes, so that the next delivery runs it at once.
		log.Info("job interrupted by shutdown; leaving it for another worker")
		claim.release(log)
		return
	}
	if !w.confirmClaim(withClaim(ctx, claim), log) {
		// Another attempt owns the job now; its result answers this
		// delivery once stored (a redelivery waits for it).
		_ = d.Nak(time.Second)
		return
	}
	tRan := time.Now()
	res.BatchRow, res.BatchAttempt = job.BatchRow, job.BatchAttempt // for get_job_results
	observeJob(job, res, tStart, span)
	stampAudit(job, res)
	if err := w.storeResultHeld(ctx, res, log); err != nil {
		log.Error("store result failed; the job will be redelivered", "err", err)
		claim.release(log)
		_ = d.Nak(time.Second)
		return
	}
	tStored := time.Now()
	if err := d.Ack(); err != nil {
		log.Warn("ack failed; the stored result will answer a redelivery", "err", err)
	}
	w.audit(ctx, job, res, log)
	if log.Enabled(ctx, slog.LevelDebug) {
		logStages(log, job, res, tDelivered, tStart, tRan, tStored, time.Now())
	}
}

// logStages writes, at debug level, where a job's time on this worker went:
// queue_ms from its publication to its handling here (the publisher's
// clock: meaningful when both share one), claim_ms the part of it from
// the delivery to the claim won, setup_ms before the executor
// (limits, session directories, the script, the environment, the cgroup),
// run_ms the executor's wall time (exec_ms: the process's own, as the
// executor measures it), post_ms from the executor's return to the result
// being ready, store_ms storing it, ack_ms the acknowledgement.
func logStages(log *slog.Logger, job *wire.Job, res *wire.Result, delivered, start, ran, stored, acked time.Time) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	args := []any{"queue_ms", ms(start.Sub(job.EnqueuedAt)), "claim_ms", ms(start.Sub(delivered)),
		"delivered_at_ns", delivered.UnixNano()}
	if !res.StartedAt.IsZero() && res.FinishedAt.After(res.StartedAt) {
		args = append(args, "setup_ms", ms(res.StartedAt.Sub(start)),
			"run_ms", ms(res.FinishedAt.Sub(res.StartedAt)), "exec_ms", res.DurationMS,
			"post_ms", ms(ran.Sub(res.FinishedAt)))
	}
	args = append(args, "store_ms", ms(stored.Sub(ran)), "ack_ms", ms(acked.Sub(stored)))
	log.Debug("job timing", args...)
}

func (w *Worker) storeResult(ctx context.Context, res *wire.Result) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var stored bool
		if stored, err = w.broker.PutResult(context.WithoutCancel(ctx), res); err == nil {
			if !stored {
				w.logStoredFirst(ctx, res)
			}
			return nil
		}
		select {
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return err
}

// logStoredFirst says whose result was stored before res: an earlier try
// of this very write (sent while NATS was away, and stored once it was
// back), or another attempt of the job.
func (w *Worker) logStoredFirst(ctx context.Context, res *wire.Result) {
	prev, err := w.broker.GetResult(context.WithoutCancel(ctx), res.JobID)
	switch {
	case err == nil && prev.WorkerID == res.WorkerID && prev.Attempt == res.Attempt:
		w.log.Info("result stored by an earlier try of this write", "job", res.JobID)
	case err == nil:
		w.log.Info("another attempt stored this job's result first", "job", res.JobID,
			"stored_by", prev.WorkerID, "stored_attempt", prev.Attempt)
	default:
		w.log.Info("a result of this job was stored first", "job", res.JobID)
	}
}

func (w *Worker) result(job *wire.Job, attempt int, status wire.Status, msg string) *wire.Result {
	now := time.Now().UTC()
	return &wire.Result{
		V: wire.Version, JobID: job.ID, Scope: job.Scope, Status: status, ExitCode: -1,
		Message: msg, WorkerID: w.cfg.ID, EnvID: envspec.DefaultID, Attempt: attempt,
		StartedAt: now, FinishedAt: now,
	}
}

// jobHandler runs one kind of job, once run has checked what every job
// needs (a known kind, a valid scope, a deadline still ahead).
type jobHandler func(w *Worker, ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result

// handlers are the kinds of job a worker runs.
var handlers = map[wire.JobKind]jobHandler{
	wire.KindExecute: (*Worker).runExecute,
	wire.KindInstall: (*Worker).runInstall,
	wire.KindInspect: (*Worker).runInspect,
	wire.KindFiles:   (*Worker).runFiles,
}

// run checks what every job needs, then hands the job to its kind's handler.
func (w *Worker) run(ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result {
	h, ok := handlers[job.Kind]
	switch {
	case !ok:
		return w.result(job, attempt, wire.StatusRejected, fmt.Sprintf("this worker does not run %q jobs", job.Kind))
	case !wire.ValidScope(job.Scope):
		return w.result(job, attempt, wire.StatusRejected, "invalid session scope")
	case !job.Deadline.IsZero() && time.Now().After(job.Deadline):
		return w.result(job, attempt, wire.StatusExpired, "the job's deadline passed before a worker could start it")
	case w.batchCancelled(ctx, job, log):
		return w.result(job, attempt, wire.StatusCancelled, "the job's batch was cancelled before a worker started it")
	}
	return h(w, ctx, job, attempt, log)
}

// runExecute runs the job's code in its session, environment and limits.
func (w *Worker) runExecute(ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result {
	if strings.TrimSpace(job.Code) == "" {
		return w.result(job, attempt, wire.StatusRejected, "code is empty")
	}
	set, err := limits.Resolve(w.cfg.Limits, w.cfg.MaxLimits, job.Limits)
	if err != nil {
		return w.result(job, attempt, wire.StatusRejected, err.Error())
	}
	cwd, scripts, uid, disk, err := w.sessionDirs(ctx, job.Scope)
	if err != nil {
		telemetry.SandboxFailed("session")
		return w.result(job, attempt, wire.StatusInternal, "prepare session directory: "+err.Error())
	}
	defer w.releaseSession(job.Scope, disk)
	if err := disk.setLimit(set.Disk); err != nil {
		return w.result(job, attempt, wire.StatusInternal, "set the disk limit: "+err.Error())
	}
	ws, err := w.restoreWorkspace(ctx, job.Scope, cwd, uid, disk, set.Disk, job.KnownHolder, log)
	if err != nil {
		return w.restoreFailure(job, attempt, set.Disk, err)
	}
	if ws != nil && ws.rec.Snapshot == job.ID {
		// The session's files were saved after this very job: an earlier
		// attempt ran it to its end, confirmed its claim and saved them,
		// then its worker stopped (SIGSTOP, a partition) or died, or could
		// not store the result, before the result was stored. Run again,
		// the job would do its work a second time over the first run's
		// files, and its caller be told it ran once: through a cluster, a
		// job that appended a line and counted them answered 2, with no
		// sign of the first run. The files hold what it did; the output
		// is gone.
		log.Warn("an earlier attempt of this job saved the session's files after it ran, and stored no result; not run again",
			"saved_by", ws.rec.Worker)
		return w.result(job, attempt, wire.StatusInternal, fmt.Sprintf("job %s ran to its end on worker %s, which saved the "+
			"session's files but stopped or failed before it stored the job's result: the files hold what the job did, its "+
			"output is lost, and it was not run again (that would have done its work twice)", job.ID, ws.rec.Worker))
	}
	script := filepath.Join(scripts, job.ID+"_"+wire.CleanFilename(job.Filename))
	if err := w.scripts.write(scripts, script, job.Code); err != nil && !errors.Is(err, os.ErrExist) {
		return w.result(job, attempt, wire.StatusInternal, "save script: "+err.Error())
	}
	// The script is the job's copy of its code for as long as the job runs
	// (a traceback names it, the job may read __file__); once the job's
	// processes are gone nothing reads it: the run history keeps the code,
	// and a redelivered job writes it again. Kept, every job's code stayed
	// on the worker's disk for ever (six 16 MiB calls, 96 MiB
	// under scripts/). Removed before the result is stored, so a result
	// never names a script that is still there; its file is emptied and
	// kept for the session's next job (scriptFiles).
	defer w.scripts.release(script, job.ID, log)

	timeout := time.Duration(job.TimeoutMS) * time.Millisecond
	if timeout <= 0 || timeout > w.cfg.MaxTimeout {
		timeout = w.cfg.MaxTimeout
	}
	limit := job.OutputLimit
	if limit <= 0 || limit > w.cfg.OutputLimit {
		limit = w.cfg.OutputLimit
	}
	spec := w.spec(script, cwd, cwd)
	envID := envspec.DefaultID
	if job.Env != nil {
		// The environment's build is not part of the job's timeout, but is
		// bounded by the job's deadline.
		ectx := ctx
		if !job.Deadline.IsZero() {
			var cancel context.CancelFunc
			ectx, cancel = context.WithDeadline(ctx, job.Deadline)
			defer cancel()
		}
		env, _, err := w.ensureEnv(ectx, job, log)
		if err != nil {
			return w.envFailure(job, attempt, err)
		}
		defer env.Release()
		spec, envID = w.envSpec(env, script, cwd, cwd), env.ID
	}
	gj, refused := w.gpuLease(ctx, job, timeout, attempt, log)
	if refused != nil {
		return refused
	}
	spec.Timeout, spec.OutputLimit = timeout, limit
	withParams(&spec, job)
	if err := withOutputDir(&spec, job, cwd, uid); err != nil {
		return w.result(job, attempt, wire.StatusInternal, err.Error())
	}
	jl, err := w.prepareLimits(job, set, &spec, cwd, scripts, uid, disk)
	if err != nil {
		telemetry.SandboxFailed("limits")
		gj.release()
		return w.result(job, attempt, wire.StatusInternal, err.Error())
	}
	// The job's processes are gone when the run returns (in a sandbox its
	// PID namespace dies with it); emptying the cgroup for the next job
	// waits for their teardown (address space, namespaces), which the
	// result need not wait for. Whatever might still be in it is killed.
	defer func() { go jl.release(log) }()
	if err := w.confineGPUs(gj, &spec, jl); err != nil {
		return w.result(job, attempt, wire.StatusInternal, "gpu devices: "+err.Error())
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if disk == nil {
		go watchDisk(jctx, cancel, cwd, set.Disk, diskWatchInterval)
	}
	outputFiles := keepOutputFiles(&spec, job.ID, cwd, uid, set.Disk, log)
	pictures := showPictures(&spec, job.ID, cwd, log)
	stream := w.streamOutput(&spec, job)
	started := time.Now().UTC()
	out, err := w.runJob(jctx, spec, gj)
	stream()
	files := outputFiles()
	images, notes := pictures()
	diskStopped := errors.Is(context.Cause(jctx), errDiskLimit)
	if ctx.Err() == nil && diskStopped {
		err = nil // the disk watch stopped it; not a failure of the run
	}
	facts := runFacts{
		out: out, err: err, usage: jl.usage(), set: set, cgroupMemory: jl.group != nil && set.Memory > 0,
		timeout: timeout, shutdown: ctx.Err() != nil, diskStopped: diskStopped,
		diskUsage: func() int64 { return disk.usage(cwd) }, diskFull: disk.fullFunc(),
	}
	v := classify(facts)
	if disk == nil {
		v = settleDisk(v, cwd, started, set.Disk)
	}
	res := w.result(job, attempt, v.status, v.message)
	res.Limit = v.limit
	res.EnvID = envID
	res.StartedAt, res.FinishedAt = started, time.Now().UTC()
	res.ScriptPath = script
	res.GPU = gj.usage()
	saveNote := ""
	if w.confirmClaim(ctx, log) {
		saveNote = w.saveWorkspace(ctx, ws, job.ID, cwd, log)
	}
	w.reportJobWorkdir(ctx, job, disk, cwd, log)
	if !facts.started() {
		telemetry.SandboxFailed("start")
		log.Error("start python failed", "err", err)
		return res
	}
	if errors.Is(err, runner.ErrZygoteDied) {
		log.Error("zygote died mid-job", "err", err)
	}
	res.ExitCode, res.Signal = out.ExitCode, out.Signal
	res.Stdout = cutOutput("stdout", out.Stdout, out.StdoutCut, out.StdoutBytes, out.StdoutSpilled, files["stdout"])
	res.Stderr = cutOutput("stderr", out.Stderr, out.StderrCut, out.StderrBytes, out.StderrSpilled, files["stderr"])
	res.StdoutFile, res.StderrFile = files["stdout"], files["stderr"]
	res.Images, res.Notes = images, notes
	if saveNote != "" {
		res.Notes = append(res.Notes, saveNote)
	}
	res.Files = changedFiles(cwd, started)
	if job.OutputDir != "" {
		var notes []string
		res.Files, notes = outputDirFiles(cwd, job, started)
		res.Notes = append(res.Notes, notes...)
	}
	res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
	res.StdoutBytes, res.StderrBytes = out.StdoutBytes, out.StderrBytes
	res.DurationMS = float64(out.Duration.Microseconds()) / 1000
	log.Info("job done", "status", res.Status, "ms", res.DurationMS)
	return res
}

// diskWatchInterval is how often a running job's working directory is
// measured against its disk limit.
const diskWatchInterval = 100 * time.Millisecond

func (w *Worker) closeCgroups() {
	if w.cgroups != nil {
		if err := w.cgroups.Close(); err != nil {
			w.log.Warn("job cgroups not removed", "err", err)
		}
		w.cgroups = nil
	}
}

// spec is the runner.Spec of a job of the default environment: script run
// in dir, with home as HOME (none when empty).
func (w *Worker) spec(script, dir, home string) runner.Spec {
	return runner.Spec{
		// The base environment is the worker's: sessions install into
		// environments derived from it, never into it.
		Python: w.python, TrustSite: true, Script: script, Dir: dir,
		Env:     runner.ChildEnv(os.Environ(), w.venvDir, home, w.cfg.EnvPassthrough, w.childExtra),
		Rlimits: runner.NoCoreFiles(), // a crash leaves no core file in the session's directory
	}
}

// removeScript deletes a job's script once the job is over. The worker
// removes it as root (or, rootless, as the directory's owner); the job's
// uid cannot, its scripts directory being read-only to it.
func removeScript(script string, log *slog.Logger) {
	if err := os.Remove(script); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("remove the job's script", "script", script, "err", err)
	}
}

// writeNew creates path with content, refusing to follow or replace anything
// already there (a redelivered job finds its own script and reuses it).
func writeNew(path, content string) error {
	// Readable: a sandboxed job reads it as its session's uid, through a
	// directory only that uid (and root) may enter.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
