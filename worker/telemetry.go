package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/internal/telemetry"
	"github.com/codexec/codexec/wire"
)

// readiness is what the worker's readiness check reads: Start has
// finished and Stop has not begun (the default environment is built, the worker consumes), and
// the default environment's warm interpreter has finished starting (in
// zygote mode; whether it started, or failed and jobs run with spawn,
// codexec_zygotes_alive and the logs tell).
type readiness struct {
	started atomic.Bool
	warmed  atomic.Bool
}

// Watch makes p report this worker: readiness (NATS and Redis answer, the
// worker is started with its default environment and warm interpreter),
// its pool's queue depth and its warm interpreters alive. Call it before
// Start, so that p says "not ready" while the worker starts.
func (w *Worker) Watch(p *telemetry.Probe) {
	p.AddCheck("nats", w.broker.Ping)
	p.AddCheck("redis", w.store.Ping)
	p.AddCheck("worker", w.ready)
	p.WatchQueue(w.cfg.Pool, w.broker.QueueDepth)
	p.WatchZygotes(w.zygotesAlive)
}

func (w *Worker) ready(context.Context) error {
	switch {
	case !w.health.started.Load():
		return errors.New("worker: starting (sandbox, default environment), or stopping")
	case w.cfg.ExecMode == ExecZygote && !w.health.warmed.Load():
		return errors.New("worker: the default environment's warm interpreter is starting")
	}
	return nil
}

// zygotesAlive counts the worker's warm interpreters ready to fork jobs.
func (w *Worker) zygotesAlive() int {
	if !w.health.started.Load() || w.pool == nil {
		return 0
	}
	return w.pool.Alive()
}

// observeJob records a job this worker finished (started at start), and
// ends its span.
func observeJob(job *wire.Job, res *wire.Result, start time.Time, span telemetry.Span) {
	telemetry.JobFinished(string(job.Kind), string(res.Status), res.Limit, job.EnqueuedAt, start, time.Since(start))
	telemetry.EndJob(span, string(res.Status), res.Limit)
}

// startJobSpan starts the job's span (a no-op one unless --otel-endpoint
// is set), in the trace of the call that made the job.
func (w *Worker) startJobSpan(job *wire.Job) telemetry.Span {
	parent, state := job.TraceParent, job.TraceState
	if !wire.ValidTraceParent(parent) {
		parent = ""
	}
	if parent == "" || !wire.ValidTraceState(state) {
		state = ""
	}
	return telemetry.StartJob(string(job.Kind), parent, state, job.ID, w.cfg.Pool, w.cfg.ID)
}

// observeEnv records how a job's environment was had; a wait cut short by
// the job's own end is no failure of the environment.
func observeEnv(ctx context.Context, env *envcache.Env, took time.Duration, err error) {
	if err != nil && ctx.Err() != nil {
		return
	}
	telemetry.EnvReady(env != nil && env.Built, took, err)
}

// jobLogger is w's logger for one delivery of job: every line names the
// job (the id the frontend's lines and the caller's result name too), the
// attempt, and the caller's W3C trace context when the call carried one.
func jobLogger(log *slog.Logger, job *wire.Job, attempt int) *slog.Logger {
	args := []any{"job", job.ID, "attempt", attempt}
	if id := wire.TraceID(job.TraceParent); id != "" {
		args = append(args, "trace_id", id, "traceparent", job.TraceParent)
		if job.TraceState != "" && wire.ValidTraceState(job.TraceState) {
			args = append(args, "tracestate", job.TraceState)
		}
	}
	return log.With(args...)
}
