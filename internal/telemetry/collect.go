package telemetry

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	readyDesc = prometheus.NewDesc("codexec_ready",
		"1 when every readiness check of the process passes (what /readyz answers 200 to), else 0.", nil, nil)
	checkDesc = prometheus.NewDesc("codexec_check_up",
		"1 when the readiness check passes, else 0: nats and redis (connection state: the server answers), worker (started, default environment built, its warm interpreter's start over).",
		[]string{"check"}, nil)
	queueDesc = prometheus.NewDesc("codexec_queue_depth",
		"Jobs waiting in the pool's queue (JetStream consumer state: pending), read at scrape time, at most once a second.",
		[]string{"pool"}, nil)
	unackedDesc = prometheus.NewDesc("codexec_queue_unacked",
		"Jobs of the pool's queue delivered to a worker and not yet acknowledged.",
		[]string{"pool"}, nil)
	zygotesDesc = prometheus.NewDesc("codexec_zygotes_alive",
		"Warm interpreters alive and ready to fork jobs.", nil, nil)
)

// probeCollector reads what a Probe watches at scrape time.
type probeCollector struct{ p *Probe }

func (c probeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{readyDesc, checkDesc, queueDesc, unackedDesc, zygotesDesc} {
		ch <- d
	}
}

func (c probeCollector) Collect(ch chan<- prometheus.Metric) {
	p := c.p
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	failing := p.Failing(ctx)
	p.mu.Lock()
	names := make([]string, 0, len(p.checks))
	for _, ck := range p.checks {
		names = append(names, ck.name)
	}
	queues, zygotes := append([]*queueWatch(nil), p.queues...), append([]func() int(nil), p.zygotes...)
	p.mu.Unlock()

	ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, boolFloat(len(failing) == 0))
	for _, name := range names {
		_, bad := failing[name]
		ch <- prometheus.MustNewConstMetric(checkDesc, prometheus.GaugeValue, boolFloat(!bad), name)
	}
	for _, q := range queues {
		waiting, unacked, ok := q.depth(ctx)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(queueDesc, prometheus.GaugeValue, float64(waiting), q.pool)
		ch <- prometheus.MustNewConstMetric(unackedDesc, prometheus.GaugeValue, float64(unacked), q.pool)
	}
	if len(zygotes) > 0 {
		n := 0
		for _, alive := range zygotes {
			n += alive()
		}
		ch <- prometheus.MustNewConstMetric(zygotesDesc, prometheus.GaugeValue, float64(n))
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// queueWatch reads one pool's queue depth, at most once per cacheFor.
type queueWatch struct {
	pool string
	read func(ctx context.Context, pool string) (waiting, unacked uint64, err error)

	mu               sync.Mutex
	at               time.Time
	waiting, unacked uint64
	err              error
}

// depth returns the last reading if it is fresh, else reads again; ok is
// false when the reading failed (the series is then left out).
func (q *queueWatch) depth(ctx context.Context) (waiting, unacked uint64, ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.at.IsZero() || time.Since(q.at) >= cacheFor {
		rctx, cancel := context.WithTimeout(ctx, cacheFor)
		q.waiting, q.unacked, q.err = q.read(rctx, q.pool)
		cancel()
		q.at = time.Now()
	}
	return q.waiting, q.unacked, q.err == nil
}
