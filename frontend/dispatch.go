package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
)

// The path every job takes from a tool to a worker and back: find the live
// workers of the pool, choose one by placement when the job has an
// environment, publish, watch a targeted worker's presence, and wait for the
// result.

// pool returns the presence records of the live workers of the frontend's
// pool, sorted by worker id. When the state store does not answer, it
// returns the records it last read if they are recent (see presenceOf).
func (f *Frontend) pool(ctx context.Context) ([]envspec.Advert, error) {
	adverts, _, err := f.presenceOf(ctx)
	return adverts, err
}

// presenceMaxAge is how old the last presence read may be to stand in for
// the store's while the store does not answer.
const presenceMaxAge = time.Minute

// outageMemory is how long after a failed read of the presence records an
// empty pool is taken for records lost with the store rather than for
// workers gone.
const outageMemory = time.Minute

// presenceOf reads the pool's presence records. live says they come from
// the store now; when the store fails, the last records read within
// presenceMaxAge are returned with live false, and without such records
// the store's error.
func (f *Frontend) presenceOf(ctx context.Context) (adverts []envspec.Advert, live bool, err error) {
	members, err := f.store.Members(ctx, f.cfg.Keys.Workers())
	now := time.Now()
	if err != nil {
		f.presence.failed(now)
		if last, ok := f.presence.last(now, presenceMaxAge); ok {
			return last, false, nil
		}
		return nil, false, fmt.Errorf("%w: %v", ErrStoreUnreachable, err)
	}
	all := f.presence.decode(members)
	mine := all[:0]
	for _, a := range all {
		if a.Pool == f.cfg.Pool {
			mine = append(mine, a)
		}
	}
	f.presence.read(mine, now)
	return mine, true, nil
}

// awaitAnnounce is called when the store says no worker of the pool is
// live. Right after the store failed, the records may have expired with
// it while the workers run: the job goes to the pool (ok, no adverts) and
// its deadline decides. Otherwise it waits up to AnnounceWait for a worker
// to announce itself, and returns its records; none at all is an error
// that says what was seen.
func (f *Frontend) awaitAnnounce(ctx context.Context) ([]envspec.Advert, error) {
	if f.presence.failedWithin(time.Now(), outageMemory) {
		f.log.Warn("no worker presence since the state store failed; sending the job to the pool", "pool", f.cfg.Pool)
		return nil, nil
	}
	deadline := time.Now().Add(f.cfg.AnnounceWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(announcePoll):
		}
		adverts, live, err := f.presenceOf(ctx)
		if err != nil || !live {
			f.log.Warn("worker presence unreadable; sending the job to the pool", "pool", f.cfg.Pool, "err", err)
			return nil, nil
		}
		if len(adverts) > 0 {
			return adverts, nil
		}
	}
	return nil, fmt.Errorf("no live worker in pool %q: none has announced itself in the last %s (a running worker renews its presence every few seconds); "+
		"if none runs, start one with `codexec worker`; if some run, check their connection to Redis and NATS", f.cfg.Pool, f.cfg.AnnounceWait)
}

// announcePoll is how often awaitAnnounce reads the presence records.
const announcePoll = 250 * time.Millisecond

// dispatch publishes job: an execution job goes to the worker holding its
// session's working directory when it can run it (workspaceHolder); a job
// with an environment otherwise goes to the worker placement chooses (its
// own subject when it consumes one), any other to the pool. record, when
// not nil, starts recording the job where its caller keeps it (the runs
// history); submit calls it before the job is first published. It returns
// the worker the job was sent to ("" for the pool), or a toolError saying
// why it was not sent (naming the job when it may still run).
func (f *Frontend) dispatch(ctx context.Context, job *wire.Job, record func(context.Context)) (string, error) {
	fail := func(status wire.Status, format string, args ...any) (string, error) {
		te := failure(status, format, args...)
		te.Filename = job.Filename
		return "", te
	}
	t0 := time.Now()
	adverts, live, err := f.dispatchPresence(ctx)
	tPool := time.Now()
	if err != nil {
		return fail(wire.StatusInternal, "%v", err)
	}
	// A worker's own subject only when the records are the store's now
	// (see dispatchPresence), or for a session's files when its record
	// cannot be read either (workspaceHolder).
	target := f.workspaceHolder(ctx, job, adverts, live)
	if target == "" && job.Env != nil && len(adverts) > 0 {
		chosen, _, err := envspec.Choose(adverts, *job.Env, job.EnvID)
		if err != nil {
			return fail(wire.StatusRejected, "environment %s cannot run in pool %q: %v", job.EnvID, f.cfg.Pool, err)
		}
		for _, a := range adverts {
			if a.WorkerID == chosen && a.Targeted && live {
				target = chosen
			}
		}
	}
	var gpuWait string // where a GPU job waits, told once it is queued
	if job.GPU != nil {
		if target, gpuWait, err = f.placeGPU(ctx, job, adverts, live); err != nil {
			te := asToolError(err)
			te.Filename = job.Filename
			return "", te
		}
	}
	var opts []broker.PublishOption
	if target != "" {
		opts = append(opts, broker.ToWorker(target))
	}
	withTenant(ctx, job)
	withTraceContext(ctx, job)
	if err := f.admitJob(ctx, job); err != nil {
		f.gpuJobs.done(job.ID) // nothing was queued
		te := asToolError(err)
		te.Filename = job.Filename
		return "", te
	}
	// The worker makes the scope's directories (its file system, 6.6 MB
	// of disk) for any job, a read of a file included: the collector
	// removes them only from a scope whose owner is recorded. Until
	// 2026-12-05 a resources/read in a new session was recorded nowhere,
	// so its file system stayed on the worker for good.
	f.noteOwner(ctx, job.Scope)
	if err := f.fair.admit(ctx, job, f.fairShare(adverts), resultGrace); err != nil {
		f.gpuJobs.done(job.ID) // nothing was queued
		f.releaseJob(job, true)
		if ctx.Err() != nil {
			return fail(wire.StatusInternal, "the call ended before its job was queued: nothing ran")
		}
		return fail(wire.StatusExpired, "job was not queued, and will not run: %v", err)
	}
	tSubmit := time.Now()
	if err := f.submit(ctx, job, record, opts...); err != nil {
		f.fair.release(job.ID)
		f.cancelAbandoned(ctx, job) // it may be queued later: it must not run
		f.releaseJob(job, false)
		te := asToolError(err)
		te.Filename = job.Filename
		return "", te
	}
	f.announceGPUWait(ctx, job, gpuWait)
	if f.log.Enabled(ctx, slog.LevelDebug) {
		// submit_at_ns and the worker's delivered_at_ns (the same clock in
		// one process) time the queue's own hop.
		f.log.Debug("dispatched", "job", job.ID, "pool_ms", ms(tPool.Sub(t0)), "submit_ms", ms(time.Since(tPool)),
			"submit_at_ns", tSubmit.UnixNano())
	}
	return target, nil
}

// dispatchPresence is the presence dispatch places a job with. live says
// the records come from the store now: only then is a job sent to one
// worker's own subject (a worker that died while the store was down could
// not be noticed). Without any records (the store down for long, or empty
// records right after it failed) the job goes to the pool, where any
// worker that still consumes takes it, and its deadline decides. Only an
// empty pool the store vouches for, with nobody announcing itself, is an
// error.
func (f *Frontend) dispatchPresence(ctx context.Context) (adverts []envspec.Advert, live bool, err error) {
	adverts, live, err = f.presenceOf(ctx)
	switch {
	case err != nil:
		f.log.Warn("worker presence unreadable; sending the job to the pool", "pool", f.cfg.Pool, "err", err)
		return nil, false, nil
	case live && len(adverts) == 0:
		adverts, err = f.awaitAnnounce(ctx)
		return adverts, len(adverts) > 0, err
	}
	return adverts, live, nil
}

// watchTarget republishes job to the pool if target's presence lapses
// before the job has a result (the targeted worker died). It stops when ctx
// ends. Results are create-only by job id, so should both copies run, only
// one result counts. While the presence records cannot be read, or within
// outageMemory of a failed read (a live worker's record may have expired
// with the store), the worker itself is asked (broker.WorkerAnswers): one
// nobody answers for is gone. The worker of the pool that takes the job
// then runs it on the session's files only if it can tell that its copy is
// the newest (worker/workspaces.go), and otherwise answers why not, so the
// call ends within a TargetCheck or two rather than at its deadline.
func (f *Frontend) watchTarget(ctx context.Context, job wire.Job, target string) {
	t := time.NewTicker(f.cfg.TargetCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		members, err := f.store.Members(ctx, f.cfg.Keys.Workers())
		if err != nil {
			f.presence.failed(time.Now())
		} else if _, alive := members[target]; alive {
			continue
		}
		if (err != nil || f.presence.failedWithin(time.Now(), outageMemory)) &&
			f.broker.WorkerAnswers(ctx, job.Pool, target, f.cfg.TargetCheck) {
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if _, err := f.broker.GetResult(ctx, job.ID); err == nil {
			return
		}
		f.log.Warn("targeted worker is gone; sending the job to the pool", "job", job.ID, "worker", target)
		if err := f.broker.PublishJob(ctx, &job, broker.WithMsgID(job.ID+"-pool")); err != nil && ctx.Err() == nil {
			f.log.Error("republish job", "job", job.ID, "err", err)
		}
		return
	}
}

// resultGrace is how long past a job's deadline its result is waited for.
const resultGrace = 5 * time.Second

// awaitResult waits for job's result until the job's deadline, plus a
// little for the result to travel back. target is the worker the job was
// sent to, "" for the pool. When no result comes, the toolError (internal,
// naming the job) says why.
func (f *Frontend) awaitResult(ctx context.Context, job *wire.Job, target string) (*wire.Result, error) {
	defer f.fair.release(job.ID)
	defer f.gpuJobs.done(job.ID)
	defer func() { f.releaseJob(job, ctx.Err() == nil) }()
	wctx, cancel := context.WithDeadline(ctx, job.Deadline.Add(resultGrace))
	defer cancel()
	if target != "" {
		go f.watchTarget(wctx, *job, target)
	}
	res, err := f.broker.WaitResult(wctx, job.ID)
	f.observeCall(job, res, err)
	if err == nil {
		f.rememberHolder(job, res)
	}
	fail := func(format string, args ...any) (*wire.Result, error) {
		te := internal(format, args...)
		te.JobID, te.Filename = job.ID, job.Filename
		return nil, te
	}
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil && f.cancelAbandoned(ctx, job):
		if res := f.settledResult(ctx, job); res != nil {
			return res, nil
		}
		te := failure(wire.StatusCancelled, "the call was cancelled, and job %s with it", job.ID)
		te.JobID, te.Filename = job.ID, job.Filename
		return nil, te
	case ctx.Err() != nil:
		return fail("the call was cancelled; job %s may still run and its result can be fetched with get_job_result", job.ID)
	case errors.Is(err, context.DeadlineExceeded):
		f.log.Warn("no result before the deadline", "job", job.ID)
		return fail("no result within %s: workers of pool %q are down or overloaded; if the job still runs, get_job_result fetches its result later",
			job.Deadline.Sub(job.EnqueuedAt).Round(time.Second), job.Pool)
	default:
		return fail("waiting for job %s failed: %v", job.ID, err)
	}
}

// dispatchAndAwait dispatches job and waits for its result: the whole path
// of a job whose tool does nothing while it runs.
func (f *Frontend) dispatchAndAwait(ctx context.Context, job *wire.Job) (*wire.Result, error) {
	target, err := f.dispatch(ctx, job, nil)
	if err != nil {
		return nil, err
	}
	return f.awaitResult(ctx, job, target)
}
