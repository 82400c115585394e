package frontend

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/codexec/codexec/internal/telemetry"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// watch makes p report this frontend: readiness (NATS and the state store
// answer, the frontend is not stopping) and its pool's queue depth.
func (f *Frontend) watch(p *telemetry.Probe) {
	p.AddCheck("nats", f.broker.Ping)
	p.AddCheck("redis", f.store.Ping)
	p.AddCheck("frontend", f.notDraining)
	p.WatchQueue(f.cfg.Pool, f.broker.QueueDepth)
}

// notDraining fails once the frontend has been told to stop (Drain), so
// that a load balancer stops sending it calls while its open ones finish.
func (f *Frontend) notDraining(context.Context) error {
	if f.draining.Load() {
		return errors.New("frontend: stopping")
	}
	return nil
}

// mountProbe serves, beside /mcp, /healthz and /readyz (open: probes send
// no credentials) and /metrics: open without authentication, and with it
// only to a caller whose credentials the policy accepts, since the series
// name tenants. A separate listener (--metrics-addr) serves all three
// without credentials, for a network that only Prometheus and the probes
// reach.
func (f *Frontend) mountProbe(mux *http.ServeMux) {
	p := f.cfg.Probe
	mux.HandleFunc("GET /healthz", telemetry.Live)
	mux.Handle("GET /readyz", p.ReadyHandler())
	metrics := p.MetricsHandler()
	if a := f.cfg.Access.Authenticator; a != nil {
		// A caller sees its own tenant's series only: those of the others
		// would tell it their names and how much they run.
		metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, err := a.Authenticate(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", "Bearer")
				http.Error(w, "codexec: authentication required", http.StatusUnauthorized)
				return
			}
			p.MetricsHandlerForTenant(id.Tenant).ServeHTTP(w, r)
		})
	}
	mux.Handle("GET /metrics", metrics)
}

// observeCall records the end of the wait for job's result (res nil when
// none came) and logs it: the frontend's line of the job, named by the id
// the worker's lines and the caller's result carry, with the caller's
// trace id when it sent one.
func (f *Frontend) observeCall(job *wire.Job, res *wire.Result, err error) {
	status, run := "", time.Duration(0)
	if res != nil {
		status, run = string(res.Status), time.Duration(res.DurationMS*float64(time.Millisecond))
	}
	telemetry.CallFinished(string(job.Kind), status, job.Tenant, job.EnqueuedAt, run)
	args := []any{"job", job.ID, "kind", job.Kind, "ms", ms(time.Since(job.EnqueuedAt))}
	if res != nil {
		args = append(args, "status", res.Status, "worker", res.WorkerID)
	} else {
		args = append(args, "status", "no_result", "err", err)
	}
	if id := wire.TraceID(job.TraceParent); id != "" {
		args = append(args, "trace_id", id)
	}
	f.log.Info("job finished", args...)
}

// traceKey is the context key of the call's W3C trace context.
type traceKey struct{}

type traceContext struct{ parent, state string }

// withTrace returns ctx carrying the W3C trace context (traceparent,
// tracestate) of req's _meta, when it has a valid one, and the call's
// span (a no-op one unless --otel-endpoint is set). With tracing on, the
// context carried is the span's, child of the caller's or the root of a
// new trace, so that the worker's span of the job joins the call's trace.
func withTrace(ctx context.Context, req mcp.CallToolRequest) (context.Context, telemetry.Span) {
	var tc traceContext
	if req.Params.Meta != nil {
		tc.parent, _ = req.Params.Meta.AdditionalFields["traceparent"].(string)
		if !wire.ValidTraceParent(tc.parent) {
			tc.parent = ""
		}
		tc.state, _ = req.Params.Meta.AdditionalFields["tracestate"].(string)
		if tc.parent == "" || !wire.ValidTraceState(tc.state) {
			tc.state = ""
		}
	}
	ctx, span := telemetry.StartCall(ctx, req.Params.Name, tc.parent, tc.state)
	if parent, state := telemetry.TraceContext(ctx); parent != "" {
		tc = traceContext{parent, state}
	}
	if tc.parent == "" {
		return ctx, span
	}
	return context.WithValue(ctx, traceKey{}, tc), span
}

// withTraceContext gives job the trace context of its call, if any.
func withTraceContext(ctx context.Context, job *wire.Job) {
	if tc, ok := ctx.Value(traceKey{}).(traceContext); ok && job.TraceParent == "" {
		job.TraceParent, job.TraceState = tc.parent, tc.state
	}
}
