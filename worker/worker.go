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
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/cgroup"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
)

// Worker runs jobs for one pool. Start it once; Stop it once (further calls
// are no-ops).
type Worker struct {
	cfg    Config
	broker *broker.Broker
	store  statestore.Store
	log    *slog.Logger

	python     string // the default environment's interpreter
	venvDir    string
	childExtra map[string]string // variables set in every job's environment
	pool       *runner.Pool      // warm interpreters; nil in spawn mode
	cache      *envcache.Cache   // built environments
	caps       envspec.Capabilities
	load       atomic.Int64 // jobs running
	started    time.Time    // when Start began, for the presence record
	targeted   *broker.Consumer

	// The sandbox, when the worker has one (setupSandbox): bubblewrap, the
	// sessions' uids, the job cgroups (nil without cgroups).
	box        *sandbox.Sandbox
	uids       *sandbox.UIDs
	cgroups    *cgroup.Manager
	cgroupPool *cgroupPool
	fresh      *runner.Fresh // spawn mode in a sandbox: interpreters started ahead of time
	sandboxCfg *runner.SandboxConfig

	mu       sync.Mutex
	consumer *broker.Consumer
	stopBeat context.CancelFunc
	beatDone chan struct{}
	stopped  bool
}

// New checks cfg and returns a Worker that is not yet consuming.
func New(cfg Config, b *broker.Broker, st statestore.Store) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	// Unbuffered output, so what a job printed before a timeout killed it is
	// still shown. Operator settings win.
	extra := map[string]string{"PYTHONUNBUFFERED": "1"}
	for k, v := range cfg.EnvSet {
		extra[k] = v
	}
	return &Worker{cfg: cfg, broker: b, store: st, childExtra: extra,
		log: cfg.Logger.With("worker", cfg.ID, "pool", cfg.Pool)}, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start prepares the default environment (building the venv on first use),
// announces the worker and starts consuming jobs. It returns once the worker
// is ready to run jobs.
func (w *Worker) Start(ctx context.Context) error {
	w.started = time.Now().UTC()
	for _, dir := range []string{w.cfg.DataDir, w.sessionsRoot(), w.cfg.ScriptsDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
	}
	if err := w.setupSandbox(ctx); err != nil {
		return err
	}
	if err := w.prepareEnv(ctx); err != nil {
		w.closeCgroups()
		return err
	}
	if err := w.openEnvCache(ctx); err != nil {
		w.closeCgroups()
		return err
	}
	if w.cfg.ExecMode == ExecZygote {
		w.pool = runner.NewPool(runner.PoolConfig{
			Preload: w.cfg.Preload, MaxZygotes: w.cfg.MaxZygotes, IdleTimeout: w.cfg.ZygoteIdle,
			Logger: w.log.With("component", "zygote"), Sandbox: w.sandboxCfg,
		})
		// Warm the default environment now, so that its first jobs need not
		// start an interpreter; until it is ready they do.
		go func() { _ = w.pool.Warm(context.WithoutCancel(ctx), w.spec("", "", "")) }()
	} else if w.sandboxCfg != nil {
		w.fresh = runner.NewFresh(w.sandboxCfg, w.log.With("component", "sandbox"))
	}
	if err := w.heartbeat(ctx); err != nil {
		return fmt.Errorf("worker: announce presence: %w", err)
	}
	beatCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.stopBeat, w.beatDone = cancel, make(chan struct{})
	go w.heartbeatLoop(beatCtx)

	c, err := w.broker.Consume(ctx, w.cfg.Pool, w.cfg.Concurrency, w.handle)
	if err != nil {
		cancel()
		<-w.beatDone
		if w.pool != nil {
			w.pool.Close()
		}
		if w.fresh != nil {
			w.fresh.Close()
		}
		_ = w.cache.Close()
		w.closeCgroups()
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
	w.log.Info("worker ready", "python", w.python, "concurrency", w.cfg.Concurrency, "exec_mode", w.cfg.ExecMode)
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
// cancels them and hands their jobs back to the queue), and withdraws the
// worker's presence.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	c, tc := w.consumer, w.targeted
	w.mu.Unlock()
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
	if w.pool != nil {
		w.pool.Close()
	}
	if w.fresh != nil {
		w.fresh.Close()
	}
	if w.cache != nil {
		_ = w.cache.Close()
	}
	w.closeCgroups()
	if w.stopBeat != nil {
		w.stopBeat()
		<-w.beatDone
	}
	leaveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if lerr := w.store.Leave(leaveCtx, w.cfg.Keys.Workers(), w.cfg.ID); lerr != nil {
		w.log.Warn("withdraw presence", "err", lerr)
	}
	return err
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
	w.mu.Lock()
	wi.Targeted = w.targeted != nil
	w.mu.Unlock()
	info, _ := json.Marshal(wi)
	return w.store.Touch(ctx, w.cfg.Keys.Workers(), w.cfg.ID, info, 3*w.cfg.HeartbeatInterval)
}

func (w *Worker) heartbeatLoop(ctx context.Context) {
	defer close(w.beatDone)
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.heartbeat(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("heartbeat failed", "err", err)
			}
		}
	}
}

func (w *Worker) sessionsRoot() string { return filepath.Join(w.cfg.DataDir, "sessions") }

// handle runs one delivery to completion: result stored, message acked.
func (w *Worker) handle(ctx context.Context, d *broker.Delivery) {
	job := d.Job
	log := w.log.With("job", job.ID, "attempt", d.Attempt)

	// A redelivery of a job whose result was already stored: just ack it.
	// Only a redelivery can have one, so a first delivery skips the lookup.
	if d.Attempt > 1 {
		if _, err := w.broker.GetResult(ctx, job.ID); err == nil {
			log.Info("result already stored; acking redelivery")
			_ = d.Ack()
			return
		}
	}

	log.Info("job started", "scope", job.Scope, "kind", job.Kind, "env", job.EnvID)
	w.load.Add(1)
	res := w.run(ctx, job, d.Attempt, log)
	w.load.Add(-1)
	if ctx.Err() != nil && res.Status != wire.StatusOK && res.Status != wire.StatusError {
		// The worker is stopping hard: the consumer hands the job back.
		log.Info("job interrupted by shutdown; leaving it for another worker")
		return
	}
	if err := w.storeResult(ctx, res); err != nil {
		log.Error("store result failed; the job will be redelivered", "err", err)
		_ = d.Nak(time.Second)
		return
	}
	if err := d.Ack(); err != nil {
		log.Warn("ack failed; the stored result will answer a redelivery", "err", err)
	}
}

func (w *Worker) storeResult(ctx context.Context, res *wire.Result) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var stored bool
		if stored, err = w.broker.PutResult(context.WithoutCancel(ctx), res); err == nil {
			if !stored {
				w.log.Info("another worker stored this job's result first", "job", res.JobID)
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

func (w *Worker) result(job *wire.Job, attempt int, status wire.Status, msg string) *wire.Result {
	now := time.Now().UTC()
	return &wire.Result{
		V: wire.Version, JobID: job.ID, Scope: job.Scope, Status: status, ExitCode: -1,
		Message: msg, WorkerID: w.cfg.ID, EnvID: envspec.DefaultID, Attempt: attempt,
		StartedAt: now, FinishedAt: now,
	}
}

func (w *Worker) run(ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result {
	switch {
	case job.Kind != wire.KindExecute && job.Kind != wire.KindInstall && job.Kind != wire.KindInspect:
		return w.result(job, attempt, wire.StatusRejected, fmt.Sprintf("this worker does not run %q jobs", job.Kind))
	case !wire.ValidScope(job.Scope):
		return w.result(job, attempt, wire.StatusRejected, "invalid session scope")
	case !job.Deadline.IsZero() && time.Now().After(job.Deadline):
		return w.result(job, attempt, wire.StatusExpired, "the job's deadline passed before a worker could start it")
	case job.Kind == wire.KindInstall:
		return w.runInstall(ctx, job, attempt, log)
	case job.Kind == wire.KindInspect:
		return w.runInspect(ctx, job, attempt, log)
	case strings.TrimSpace(job.Code) == "":
		return w.result(job, attempt, wire.StatusRejected, "code is empty")
	}

	set, err := limits.Resolve(w.cfg.Limits, w.cfg.MaxLimits, job.Limits)
	if err != nil {
		return w.result(job, attempt, wire.StatusRejected, err.Error())
	}
	cwd, scripts, uid, err := w.sessionDirs(job.Scope)
	if err != nil {
		return w.result(job, attempt, wire.StatusInternal, "prepare session directory: "+err.Error())
	}
	script := filepath.Join(scripts, job.ID+"_"+wire.CleanFilename(job.Filename))
	if err := writeNew(script, job.Code); err != nil && !errors.Is(err, os.ErrExist) {
		return w.result(job, attempt, wire.StatusInternal, "save script: "+err.Error())
	}

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
	spec.Timeout, spec.OutputLimit = timeout, limit
	jl, err := w.prepareLimits(job, set, &spec, cwd, scripts, uid)
	if err != nil {
		return w.result(job, attempt, wire.StatusInternal, err.Error())
	}
	// The job's processes are gone when the run returns (in a sandbox its
	// PID namespace dies with it); emptying the cgroup for the next job
	// waits for their teardown (address space, namespaces), which the
	// result need not wait for. Whatever might still be in it is killed.
	defer func() { go jl.release(log) }()
	run := runner.Run
	switch {
	case w.pool != nil:
		run = w.pool.Run
	case w.fresh != nil:
		run = w.fresh.Run
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go watchDisk(jctx, cancel, cwd, set.Disk, diskWatchInterval)
	started := time.Now().UTC()
	out, err := run(jctx, spec)
	if ctx.Err() == nil && errors.Is(context.Cause(jctx), errDiskLimit) {
		err = nil // the disk watch stopped it; not a failure of the run
	}
	usage := jl.usage()
	res := w.result(job, attempt, wire.StatusOK, "")
	res.EnvID = envID
	res.StartedAt, res.FinishedAt = started, time.Now().UTC()
	res.ScriptPath = script
	if err != nil && out.Duration == 0 {
		res.Status, res.Message = wire.StatusInternal, "start python: "+err.Error()
		log.Error("start python failed", "err", err)
		return res
	}
	res.ExitCode, res.Signal = out.ExitCode, out.Signal
	res.Stdout, res.Stderr = string(out.Stdout), string(out.Stderr)
	res.StdoutTruncated, res.StderrTruncated = out.StdoutTruncated, out.StderrTruncated
	res.StdoutBytes, res.StderrBytes = out.StdoutBytes, out.StderrBytes
	res.DurationMS = float64(out.Duration.Microseconds()) / 1000
	// Which limit the kernel's evidence names, if any; used below only
	// when the job failed, or when the cgroup counted a limit it hit.
	hit, hitMsg := limitHit(out, usage, set, jl.group != nil && set.Memory > 0)
	switch {
	case errors.Is(err, runner.ErrZygoteDied):
		res.Status, res.Message = wire.StatusInternal, "the job was killed: the warm interpreter it ran in died; run it again"
		log.Error("zygote died mid-job", "err", err)
	case out.TimedOut:
		res.Status, res.Message = wire.StatusTimeout, fmt.Sprintf("timed out after %s; the process group was killed", timeout)
		if hit != "" {
			// What kept it from finishing, e.g. a thread it could not start.
			res.Limit, res.Message = hit, res.Message+"; before that: "+hitMsg
		}
	case ctx.Err() != nil:
		res.Status, res.Message = wire.StatusInternal, "interrupted: the worker is shutting down"
	case errors.Is(context.Cause(jctx), errDiskLimit) || (set.Disk > 0 && DiskUsage(cwd) > set.Disk):
		// Measured during the run, and once more after it: a job that
		// wrote past the limit between two samples is named too.
		res.Status, res.Limit = wire.StatusLimit, wire.LimitDisk
		res.Message = fmt.Sprintf("disk limit reached (%s in the working directory): the job was killed or its files are over it", mib(set.Disk))
	case usage.OOMKills > 0 || usage.PidsMaxHits > 0:
		// The kernel refused the job (or killed one of its processes) at
		// a limit, even if its main process carried on and exited 0.
		res.Status, res.Limit, res.Message = wire.StatusLimit, hit, hitMsg
	case out.ExitCode != 0 || out.Signal != "":
		if hit != "" {
			res.Status, res.Limit, res.Message = wire.StatusLimit, hit, hitMsg
			break
		}
		if out.Signal != "" {
			res.Status, res.Message = wire.StatusError, "killed by signal: "+out.Signal
		} else {
			res.Status, res.Message = wire.StatusError, fmt.Sprintf("exit code %d", out.ExitCode)
		}
	default:
		res.Message = "exit code 0"
	}
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
		Python: w.python, Script: script, Dir: dir,
		Env:     runner.ChildEnv(os.Environ(), w.venvDir, home, w.cfg.EnvPassthrough, w.childExtra),
		Rlimits: runner.NoCoreFiles(), // a crash leaves no core file in the session's directory
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
