package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Span is a traced operation: a no-op one while tracing is off.
type Span = trace.Span

// tracer starts the spans of StartCall and StartJob: a no-op tracer until
// StartTracing installs the SDK's, so that with tracing off no span is
// recorded, buffered or sent.
var tracer atomic.Value // of tracerBox

// tracing is whether StartTracing's SDK is installed; off, StartCall and
// StartJob return offSpan without parsing a trace context.
var tracing atomic.Bool

// offSpan is the span of every call and job while tracing is off: it
// records nothing, and ending it does nothing.
var offSpan = trace.SpanFromContext(context.Background())

type tracerBox struct{ t trace.Tracer }

func init() { tracer.Store(tracerBox{noop.NewTracerProvider().Tracer("codexec")}) }

func currentTracer() trace.Tracer { return tracer.Load().(tracerBox).t }

// StartTracing exports spans to the OTLP/HTTP traces endpoint (a URL such
// as http://collector:4318/v1/traces; "" : tracing stays off) through the
// SDK's batch span processor, as service codexec in the given role. The
// exporter reads the standard OTEL_EXPORTER_OTLP_* variables (headers,
// timeout, compression, certificates); the endpoint given here wins over
// theirs. shutdown flushes the spans still buffered and stops exporting.
func StartTracing(endpoint, role string) (shutdown func(context.Context) error, err error) {
	if endpoint == "" {
		return func(context.Context) error { return nil }, nil
	}
	if u, err := url.Parse(endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("invalid OTLP endpoint %q: want http(s)://HOST[:PORT]/PATH, e.g. http://127.0.0.1:4318/v1/traces", endpoint)
	}
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint))
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(semconv.ServiceName("codexec"), attribute.String("codexec.role", role))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	tracer.Store(tracerBox{tp.Tracer("github.com/codexec/codexec")})
	tracing.Store(true)
	return func(ctx context.Context) error {
		tracing.Store(false)
		tracer.Store(tracerBox{noop.NewTracerProvider().Tracer("codexec")})
		return tp.Shutdown(ctx)
	}, nil
}

// remoteParent returns ctx with the W3C trace context (traceparent,
// tracestate, already validated by the caller) as the remote parent of
// the next span; ctx itself when traceparent is "".
func remoteParent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	carrier := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		carrier["tracestate"] = tracestate
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// StartCall starts the span of an MCP tool call, "tools/call TOOL": a
// child of the caller's trace context when it sent one, else the root of
// a new trace.
func StartCall(ctx context.Context, tool, traceparent, tracestate string) (context.Context, Span) {
	if !tracing.Load() {
		return ctx, offSpan
	}
	return currentTracer().Start(remoteParent(ctx, traceparent, tracestate), "tools/call "+tool,
		trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attribute.String("mcp.tool", tool)))
}

// TraceContext is the W3C trace context (traceparent, tracestate) of the
// span in ctx when that span is recorded (tracing is on), else "", "".
func TraceContext(ctx context.Context) (traceparent, tracestate string) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return "", ""
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"], carrier["tracestate"]
}

// StartJob starts a worker's span of a job, "job KIND", the child of the
// trace context the job carries (a new trace when it carries none).
// Nothing of the job's code or its tenant is recorded.
func StartJob(kind, traceparent, tracestate, jobID, pool, workerID string) Span {
	if !tracing.Load() {
		return offSpan
	}
	_, span := currentTracer().Start(remoteParent(context.Background(), traceparent, tracestate), "job "+kind,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
			attribute.String("codexec.job.id", jobID),
			attribute.String("codexec.pool", pool),
			attribute.String("codexec.worker.id", workerID)))
	return span
}

// EndJob ends a job's span with how the job ended: its status and the
// limit it hit ("" : none).
func EndJob(span Span, status, limit string) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.String("codexec.job.status", status), attribute.String("codexec.job.limit", limit))
	if status != "ok" && status != "error" {
		span.SetStatus(codes.Error, status)
	}
	span.End()
}

// EndCall ends a tool call's span, marked failed when err is not nil (its
// text is not recorded: it may quote the caller's input).
func EndCall(span Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, "call failed")
	}
	span.End()
}
