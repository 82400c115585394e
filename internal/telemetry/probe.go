package telemetry

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// checkTimeout bounds one readiness check; cacheFor is how long the
// results of the checks, and a read of the queue's depth, are reused, so
// that probes and scrapes, however frequent, cost NATS and Redis at most
// one request each a second.
const (
	checkTimeout = 2 * time.Second
	cacheFor     = time.Second
)

// A Probe is what one process serves at /metrics, /healthz and /readyz:
// the process-wide Registry, plus what its roles watch (readiness checks,
// the queue's depth, warm interpreters alive), read at scrape time. The
// zero value is not usable; NewProbe makes one. A process with several
// roles (codexec dev) shares one Probe between them.
type Probe struct {
	reg *prometheus.Registry
	log *slog.Logger

	mu       sync.Mutex
	checks   []check
	checked  time.Time        // when the results below were taken
	failing  map[string]error // the failing checks of the last round
	inFlight chan struct{}    // closed when the running round ends; nil when none runs
	queues   []*queueWatch
	zygotes  []func() int
}

type check struct {
	name string
	fn   func(context.Context) error
}

// NewProbe returns a Probe with no checks (always ready) that logs changes
// of readiness to log.
func NewProbe(log *slog.Logger) *Probe {
	if log == nil {
		log = slog.Default()
	}
	p := &Probe{reg: prometheus.NewRegistry(), log: log}
	p.reg.MustRegister(probeCollector{p})
	return p
}

// AddCheck makes readiness depend on fn (nil: ready), under name; a check
// of the same name is replaced (two roles of one process checking NATS).
// Each check's state is the metric codexec_check_up{check=name}.
func (p *Probe) AddCheck(name string, fn func(context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checked = time.Time{}
	for i := range p.checks {
		if p.checks[i].name == name {
			p.checks[i].fn = fn
			return
		}
	}
	p.checks = append(p.checks, check{name, fn})
}

// WatchQueue reports the depth of pool's queue at scrape time, as depth
// reads it (jobs waiting, jobs delivered and not yet acknowledged), at
// most once a second. A pool watched twice is reported once.
func (p *Probe) WatchQueue(pool string, depth func(ctx context.Context, pool string) (waiting, unacked uint64, err error)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, q := range p.queues {
		if q.pool == pool {
			return
		}
	}
	p.queues = append(p.queues, &queueWatch{pool: pool, read: depth})
}

// WatchZygotes reports, at scrape time, the warm interpreters alive that
// alive counts (summed over the workers of the process).
func (p *Probe) WatchZygotes(alive func() int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.zygotes = append(p.zygotes, alive)
}

// Failing runs the checks, or reuses the results of a round less than a
// second old, and returns the failing ones by name. Rounds never overlap:
// a caller that comes while one runs waits for it.
func (p *Probe) Failing(ctx context.Context) map[string]error {
	p.mu.Lock()
	for p.inFlight != nil {
		wait := p.inFlight
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return map[string]error{"probe": ctx.Err()}
		}
		p.mu.Lock()
	}
	if !p.checked.IsZero() && time.Since(p.checked) < cacheFor {
		defer p.mu.Unlock()
		return p.failing
	}
	checks := slices.Clone(p.checks)
	done := make(chan struct{})
	p.inFlight = done
	p.mu.Unlock()

	failing := runChecks(checks)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.logChanges(failing)
	p.failing, p.checked, p.inFlight = failing, time.Now(), nil
	close(done)
	return failing
}

// runChecks runs checks at once, each bounded by checkTimeout, and returns
// the failing ones.
func runChecks(checks []check) map[string]error {
	var mu sync.Mutex
	var wg sync.WaitGroup
	failing := map[string]error{}
	for _, c := range checks {
		if c.fn == nil {
			continue
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
			defer cancel()
			if err := c.fn(ctx); err != nil {
				mu.Lock()
				failing[c.name] = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failing
}

// logChanges logs a check that starts or stops failing (not every probe).
// Called with p.mu held.
func (p *Probe) logChanges(now map[string]error) {
	for name, err := range now {
		if _, was := p.failing[name]; !was {
			p.log.Warn("not ready", "check", name, "err", err)
		}
	}
	for name := range p.failing {
		if _, still := now[name]; !still && !p.checked.IsZero() {
			p.log.Info("ready again", "check", name)
		}
	}
}

// Handler serves GET /metrics (the Prometheus text format), /healthz (200
// while the process serves) and /readyz (200 when every check passes, else
// 503 naming the failing checks; the errors themselves go to the log, not
// to whoever asks).
func (p *Probe) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.MetricsHandler())
	mux.HandleFunc("GET /healthz", Live)
	mux.HandleFunc("GET /readyz", p.serveReady)
	return mux
}

// MetricsHandler serves the Registry and the Probe's own collectors.
func (p *Probe) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers{Registry, p.reg}, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn), MaxRequestsInFlight: 4,
	})
}

// MetricsHandlerForTenant serves tenant's own series (of every metric with
// a "tenant" label, the samples of tenant itself; not even those of the
// tenants counted as "other") and the checks that /readyz tells anyone
// (codexec_check_up, codexec_ready), nothing else. It is what a caller of
// one tenant may read: the series of the others would tell it their names
// and how much they run, and the series without a tenant (the pool's jobs,
// run times, queue, builds, the process's goroutines) count every tenant's
// work, from which the caller's own is subtracted to watch the others'.
//
// The tenant's series are those labelled as CallFinished labels them
// (clean), and a tenant named "other" reads none: that label is every
// tenant's past the first MaxTenants.
func (p *Probe) MetricsHandlerForTenant(tenant string) http.Handler {
	all := prometheus.Gatherers{Registry, p.reg}
	label := clean(tenant)
	mine := label != Other
	own := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		families, err := all.Gather()
		out := families[:0]
		for _, mf := range families {
			kept := mf.Metric[:0]
			for _, m := range mf.Metric {
				if t := tenantOf(m); t == nil && public[mf.GetName()] || t != nil && mine && *t == label {
					kept = append(kept, m)
				}
			}
			if mf.Metric = kept; len(kept) > 0 {
				out = append(out, mf)
			}
		}
		return out, err
	})
	return promhttp.HandlerFor(own, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(p.log.Handler(), slog.LevelWarn),
	})
}

// public are the metrics without a tenant that MetricsHandlerForTenant
// serves: the state of the checks, which /readyz tells anyone.
var public = map[string]bool{"codexec_check_up": true, "codexec_ready": true}

// tenantOf is the value of m's "tenant" label, nil when it has none.
func tenantOf(m *dto.Metric) *string {
	for _, l := range m.GetLabel() {
		if l.GetName() == "tenant" {
			v := l.GetValue()
			return &v
		}
	}
	return nil
}

// Live answers a liveness probe: the process serves HTTP.
func Live(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "ok\n")
}

// ServeReady answers a readiness probe.
func (p *Probe) serveReady(w http.ResponseWriter, r *http.Request) {
	failing := p.Failing(r.Context())
	w.Header().Set("Content-Type", "application/json")
	if len(failing) == 0 {
		_, _ = io.WriteString(w, `{"status":"ready"}`+"\n")
		return
	}
	names := make([]string, 0, len(failing))
	for name := range failing {
		names = append(names, name)
	}
	slices.Sort(names)
	w.WriteHeader(http.StatusServiceUnavailable)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "not ready", "failing": names})
}

// ReadyHandler serves /readyz alone (for a listener that mounts the
// endpoints itself).
func (p *Probe) ReadyHandler() http.Handler { return http.HandlerFunc(p.serveReady) }
