package cli

import (
	"context"
	"log/slog"
	"net/url"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/internal/telemetry"
)

// tracingFlushGrace bounds how long a stopping process waits for its last
// spans to reach the collector.
const tracingFlushGrace = 5 * time.Second

// tracingFlag registers --otel-endpoint, of every role.
func tracingFlag(f *flagenv.Flags, p *string) {
	f.String(p, "otel-endpoint", "CODEXEC_OTEL_ENDPOINT", "",
		"export OpenTelemetry trace spans (tool calls, jobs) to this OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces; the exporter's OTEL_EXPORTER_OTLP_* variables (headers, timeout, certificates) apply (empty: off)")
}

// startTracing exports the role's spans to endpoint ("" : nothing) until
// the returned stop, which flushes the spans still buffered.
func startTracing(endpoint, role string, log *slog.Logger) (stop func(), err error) {
	shutdown, err := telemetry.StartTracing(endpoint, role)
	if err != nil {
		return nil, flagenv.UsageError{Err: err}
	}
	if endpoint == "" {
		return func() {}, nil
	}
	if u, err := url.Parse(endpoint); err == nil {
		log.Info("exporting traces", "endpoint", u.Redacted())
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushGrace)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("flushing traces", "err", err)
		}
	}, nil
}
