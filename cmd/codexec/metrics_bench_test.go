package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
)

// benchCount is $name as a positive number, else def.
func benchCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// timedPrint runs print(1) through c and returns how long the call took.
func timedPrint(b *testing.B, c *client.Client) time.Duration {
	b.Helper()
	t0 := time.Now()
	if _, er := call(b, c, "execute_code", map[string]any{"code": "print(1)"}); er.Status != "ok" {
		b.Fatalf("print(1): %s %s", er.Status, er.Message)
	}
	return time.Since(t0)
}

// BenchmarkMetricsCost measures what metrics cost on the execute path: two
// `codexec dev` processes side by side, one with --metrics=false (the
// hooks do nothing), one with metrics on and its --metrics-addr scraped
// every second (more often than Prometheus' usual 15 s), take print(1)
// calls in turns, the order alternating each round; it reports each one's
// p50 and p95 and the ratio of the p50s. CODEXEC_BENCH_CALLS calls each
// (default 300).
//
//	go test -run '^$' -bench MetricsCost -benchtime 1x ./cmd/codexec
func BenchmarkMetricsCost(b *testing.B) {
	calls := benchCount("CODEXEC_BENCH_CALLS", 300)
	off, _ := devStdio(b, b.TempDir(), "CODEXEC_METRICS=false")
	on, out := devStdio(b, b.TempDir(), "CODEXEC_METRICS_ADDR=127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, err := e2e.WaitForOutput(ctx, out, e2e.MetricsURLRe, nil)
	if err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	var scrapes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			if _, err := e2e.Scrape(ctx, base); err == nil {
				scrapes.Add(1)
			}
		}
	})
	defer func() { close(stop); wg.Wait() }()

	for range 20 { // warm both: zygotes, connections
		timedPrint(b, off)
		timedPrint(b, on)
	}
	for range b.N {
		var withM, without []time.Duration
		for i := range calls {
			if i%2 == 0 {
				without = append(without, timedPrint(b, off))
				withM = append(withM, timedPrint(b, on))
			} else {
				withM = append(withM, timedPrint(b, on))
				without = append(without, timedPrint(b, off))
			}
		}
		p50on, p50off := e2e.Percentile(withM, 50), e2e.Percentile(without, 50)
		b.ReportMetric(p50off, "p50_ms_without")
		b.ReportMetric(p50on, "p50_ms_with")
		b.ReportMetric(e2e.Percentile(without, 95), "p95_ms_without")
		b.ReportMetric(e2e.Percentile(withM, 95), "p95_ms_with")
		b.ReportMetric(e2e.Round2(p50on/p50off), "p50_ratio")
	}
	b.ReportMetric(float64(scrapes.Load()), "scrapes")
}

// BenchmarkMetricsMemory runs CODEXEC_BENCH_JOBS print(1) jobs (default
// 2,000, two minutes or so, for make bench/go; docs/observability.md has
// the figure of a longer run) through a cluster of one
// frontend and one worker process (real nats-server and redis-server, four
// callers at once, worker concurrency 2), scraping both every fifth of the
// way: it logs their resident memory, Go heap in use and number of series,
// so that growth from metrics would show.
//
//	CODEXEC_BENCH_JOBS=20000 go test -run '^$' -bench MetricsMemory -benchtime 1x -v ./cmd/codexec
func BenchmarkMetricsMemory(b *testing.B) {
	jobs := benchCount("CODEXEC_BENCH_JOBS", 2000)
	cl := startCluster(b, 1, "--metrics-addr", "127.0.0.1:0", "--concurrency", "2")
	workerBase := cl.workers[0].waitFor(b, e2e.MetricsURLRe, time.Minute)
	frontendBase := strings.TrimSuffix(cl.mcpURL, "/mcp")
	const callers = 4
	clients := make([]*client.Client, callers)
	for i := range clients {
		clients[i] = httpClient(b, cl.mcpURL)
	}
	row := func(done int) string {
		var cols []string
		for _, base := range []string{frontendBase, workerBase} {
			m := scrape(b, base)
			rss, _ := m.Value("process_resident_memory_bytes")
			heap, _ := m.Value("go_memstats_heap_inuse_bytes")
			series := 0
			for _, mf := range m {
				series += len(mf.GetMetric())
			}
			cols = append(cols, fmt.Sprintf("%6.1f MiB rss %6.1f MiB heap %4d series", rss/(1<<20), heap/(1<<20), series))
		}
		return fmt.Sprintf("%7d jobs | frontend %s | worker %s", done, cols[0], cols[1])
	}
	for range b.N {
		var next atomic.Int64
		var wg sync.WaitGroup
		report := []string{row(0)}
		step := int64(max(jobs/5, 1))
		var mu sync.Mutex
		for _, c := range clients {
			wg.Go(func() {
				for {
					n := next.Add(1)
					if n > int64(jobs) {
						return
					}
					timedPrint(b, c)
					if n%step == 0 {
						r := row(int(n))
						mu.Lock()
						report = append(report, r)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		if int64(jobs)%step != 0 {
			report = append(report, row(jobs))
		}
		b.Logf("memory after jobs (%s):\n%s", time.Now().UTC().Format(time.DateOnly), strings.Join(report, "\n"))
		m := scrape(b, workerBase)
		if v, _ := m.Value("codexec_worker_jobs_total"); int(v) < jobs {
			b.Errorf("the worker counted %v jobs, want %d", v, jobs)
		}
	}
}
