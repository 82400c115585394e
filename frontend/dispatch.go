package frontend

import (
	"context"
	"errors"
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
// pool, sorted by worker id.
func (f *Frontend) pool(ctx context.Context) ([]envspec.Advert, error) {
	members, err := f.store.Members(ctx, f.cfg.Keys.Workers())
	if err != nil {
		return nil, err
	}
	adverts := envspec.DecodeAdverts(members)
	mine := adverts[:0]
	for _, a := range adverts {
		if a.Pool == f.cfg.Pool {
			mine = append(mine, a)
		}
	}
	return mine, nil
}

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
	adverts, err := f.pool(ctx)
	tPool := time.Now()
	if err != nil {
		return fail(wire.StatusInternal, "cannot read worker presence: %v", err)
	}
	if len(adverts) == 0 {
		return fail(wire.StatusInternal, "no live worker in pool %q: start one with `codexec worker` (or check the workers' connection to NATS and Redis)", f.cfg.Pool)
	}
	target := f.workspaceHolder(ctx, job, adverts)
	if target == "" && job.Env != nil {
		chosen, _, err := envspec.Choose(adverts, *job.Env, job.EnvID)
		if err != nil {
			return fail(wire.StatusRejected, "environment %s cannot run in pool %q: %v", job.EnvID, f.cfg.Pool, err)
		}
		for _, a := range adverts {
			if a.WorkerID == chosen && a.Targeted {
				target = chosen
			}
		}
	}
	var opts []broker.PublishOption
	if target != "" {
		opts = append(opts, broker.ToWorker(target))
	}
	if err := f.submit(ctx, job, record, opts...); err != nil {
		te := asToolError(err)
		te.Filename = job.Filename
		return "", te
	}
	if f.log.Enabled(ctx, slog.LevelDebug) {
		f.log.Debug("dispatched", "job", job.ID, "pool_ms", ms(tPool.Sub(t0)), "submit_ms", ms(time.Since(tPool)))
	}
	return target, nil
}

// watchTarget republishes job to the pool if target's presence lapses
// before the job has a result (the targeted worker died). It stops when ctx
// ends. Results are create-only by job id, so should both copies run, only
// one result counts.
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
			continue
		}
		if _, alive := members[target]; alive {
			continue
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

// awaitResult waits for job's result until the job's deadline, plus a
// little for the result to travel back. target is the worker the job was
// sent to, "" for the pool. When no result comes, the toolError (internal,
// naming the job) says why.
func (f *Frontend) awaitResult(ctx context.Context, job *wire.Job, target string) (*wire.Result, error) {
	wctx, cancel := context.WithDeadline(ctx, job.Deadline.Add(5*time.Second))
	defer cancel()
	if target != "" {
		go f.watchTarget(wctx, *job, target)
	}
	res, err := f.broker.WaitResult(wctx, job.ID)
	fail := func(format string, args ...any) (*wire.Result, error) {
		te := internal(format, args...)
		te.JobID, te.Filename = job.ID, job.Filename
		return nil, te
	}
	switch {
	case err == nil:
		return res, nil
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
