package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/internal/telemetry"
)

// maxMetricsConns bounds the connections of the --metrics-addr listener.
const maxMetricsConns = 64

// metricsFlags register --metrics-addr and --metrics, of every role.
func metricsFlags(f *flagenv.Flags, p *string, on *bool) {
	f.Bool(on, "metrics", "CODEXEC_METRICS", true,
		"count jobs, environments and warm interpreters for /metrics (false: only readiness, queue depth and the process's own metrics are served)")
	f.String(p, "metrics-addr", "CODEXEC_METRICS_ADDR", "",
		"serve Prometheus metrics at http://ADDR/metrics, liveness at /healthz and readiness at /readyz, without credentials, e.g. :9464 (empty: off; a frontend serves them on its --http listener too)")
}

// serveMetrics serves p's endpoints on addr ("" : nothing) until the
// returned stop is called. The address is logged, so that a random port
// (127.0.0.1:0) can be found.
func serveMetrics(addr string, on bool, p *telemetry.Probe, log *slog.Logger) (stop func(), err error) {
	telemetry.SetEnabled(on)
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, flagenv.UsageError{Err: fmt.Errorf("--metrics-addr %s: %w", addr, err)}
	}
	// Scrapers and probes need few connections; many idle ones must not
	// take the process's descriptors.
	ln = netutil.LimitListener(ln, maxMetricsConns)
	srv := newHTTPServer(p.Handler(), log)
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
