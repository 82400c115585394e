package main

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/statestore/redistest"
)

// scrape reads base's /metrics with Prometheus' parser, failing t on error.
func scrape(t testing.TB, base string) e2e.Metrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := e2e.Scrape(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// pollUntil polls cond every 100 ms until it holds, failing t with what
// after within.
func pollUntil(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// status GETs base+path and returns the status code and body.
func status(t testing.TB, base, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, body, err := e2e.Get(ctx, base, path)
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestClusterMetricsScrape scrapes a running cluster (a real nats-server
// and redis-server, a frontend and two worker processes) with Prometheus'
// own parser while a job runs, after jobs that succeed, fail, hit a limit,
// and after a worker is killed mid-job: each job is counted under its kind,
// status and limit, no job id is a label value, the queue depth and the
// checks are there, the call's W3C trace context reached the worker's log
// lines of the job, and the job of the killed worker is counted once, by
// the worker that ran it again.
func TestClusterMetricsScrape(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2, "--metrics-addr", "127.0.0.1:0")
	workerBases := make([]string, len(cl.workers))
	for i, w := range cl.workers {
		workerBases[i] = w.waitFor(t, e2e.MetricsURLRe, time.Minute)
	}
	frontendBase := strings.TrimSuffix(cl.mcpURL, "/mcp")
	c := httpClient(t, cl.mcpURL)
	sum := func(name string, labels ...string) float64 {
		total := 0.0
		for _, base := range workerBases {
			v, _ := scrape(t, base).Value(name, labels...)
			total += v
		}
		return total
	}

	// One job running: a worker's gauge says so while it runs.
	var wg sync.WaitGroup
	wg.Go(func() {
		call(t, c, "execute_code", map[string]any{"code": "import time; time.sleep(3); print('slept')"})
	})
	pollUntil(t, 2*time.Minute, "codexec_worker_jobs_running = 1 while a job sleeps", func() bool {
		return sum("codexec_worker_jobs_running") == 1
	})
	wg.Wait()

	var ids []string
	run := func(args map[string]any, want string) {
		_, er := call(t, c, "execute_code", args)
		if er.Status != want {
			t.Fatalf("%v: status %q (%s), want %q", args, er.Status, er.Message, want)
		}
		ids = append(ids, er.JobID)
	}
	run(map[string]any{"code": "print(1)"}, "ok")
	run(map[string]any{"code": "raise ValueError('boom')"}, "error")
	run(map[string]any{"code": "open('big', 'wb').write(b'x' * (3 << 20))", "limits": map[string]any{"file_size_mb": 1}}, "limit")
	id := callTraced(t, c, "print('traced')")
	ids = append(ids, id)

	for _, want := range []struct {
		labels []string
		min    float64
	}{
		{[]string{"kind", "execute", "status", "ok", "limit", "none"}, 3},
		{[]string{"kind", "execute", "status", "error", "limit", "none"}, 1},
		{[]string{"kind", "execute", "status", "limit", "limit", "file_size"}, 1},
	} {
		if v := sum("codexec_worker_jobs_total", want.labels...); v < want.min {
			t.Errorf("codexec_worker_jobs_total%v = %v, want at least %v", want.labels, v, want.min)
		}
	}
	for name, want := range map[string]float64{
		"codexec_job_queue_wait_seconds": 5, "codexec_job_run_seconds": 5, "codexec_ready": 2,
		"codexec_queue_depth": 0,
	} {
		if v := sum(name); v != want {
			t.Errorf("workers: %s = %v, want %v", name, v, want)
		}
	}
	for i, base := range workerBases {
		wm := scrape(t, base)
		for _, check := range []string{"nats", "redis", "worker"} {
			if v, ok := wm.Value("codexec_check_up", "check", check); !ok || v != 1 {
				t.Errorf("worker %d: codexec_check_up{check=%q} = %v (present %v), want 1", i+1, check, v, ok)
			}
		}
		if _, ok := wm.Value("codexec_queue_depth", "pool", "default"); !ok {
			t.Errorf("worker %d: no codexec_queue_depth{pool=default}", i+1)
		}
		if v, _ := wm.Value("process_resident_memory_bytes"); v <= 0 {
			t.Errorf("worker %d: process_resident_memory_bytes = %v", i+1, v)
		}
	}

	fm := scrape(t, frontendBase)
	if v, _ := fm.Value("codexec_frontend_jobs_total", "kind", "execute", "status", "ok"); v != 3 {
		t.Errorf("frontend: execute jobs ok = %v, want 3", v)
	}
	if v, _ := fm.Value("codexec_job_end_to_end_seconds", "kind", "execute", "status", "limit"); v != 1 {
		t.Errorf("frontend: end-to-end observations of the limit job = %v, want 1", v)
	}
	if _, ok := fm.Value("codexec_queue_depth", "pool", "default"); !ok {
		t.Error("frontend: no codexec_queue_depth{pool=default}")
	}
	for _, base := range append([]string{frontendBase}, workerBases...) {
		for _, v := range scrape(t, base).LabelValues() {
			for _, id := range ids {
				if v == id {
					t.Errorf("%s: job id %s is a label value", base, id)
				}
			}
		}
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := status(t, base, path); code != 200 {
				t.Errorf("GET %s%s = %d %s, want 200", base, path, code, body)
			}
		}
	}

	// The trace context reached the worker's log lines of the job, which
	// name it by the id the caller got.
	traced := regexp.MustCompile(`msg="job done".* job=` + id + ` .*trace_id=4bf92f3577b34da6a3ce929d0e0e4736`)
	pollUntil(t, 10*time.Second, "the traced job's line on a worker", func() bool {
		return traced.MatchString(cl.workers[0].Out.String()) || traced.MatchString(cl.workers[1].Out.String())
	})

	// A worker killed mid-job: the other runs the job again and counts it;
	// the frontend counts one call, ok.
	okBefore := make([]float64, len(workerBases))
	for i, base := range workerBases {
		okBefore[i], _ = scrape(t, base).Value("codexec_worker_jobs_total", "status", "ok")
	}
	wg.Go(func() {
		_, er := call(t, c, "execute_code", map[string]any{"code": "import time; time.sleep(2); print('again')"})
		if er.Status != "ok" {
			t.Errorf("the killed worker's job: %s %s", er.Status, er.Message)
		}
	})
	victim := -1
	pollUntil(t, time.Minute, "a worker running the job", func() bool {
		for i, base := range workerBases {
			if v, _ := scrape(t, base).Value("codexec_worker_jobs_running"); v == 1 {
				victim = i
				return true
			}
		}
		return false
	})
	cl.workers[victim].Kill()
	wg.Wait()
	if code, _ := status(t, workerBases[victim], "/healthz"); code != 0 {
		t.Errorf("the killed worker's endpoint still answers %d", code)
	}
	if v, _ := scrape(t, workerBases[1-victim]).Value("codexec_worker_jobs_total", "status", "ok"); v-okBefore[1-victim] != 1 {
		t.Errorf("the surviving worker counted %v ok jobs since the kill, want 1 (the job, run again)", v-okBefore[1-victim])
	}
	if v, _ := scrape(t, frontendBase).Value("codexec_frontend_jobs_total", "kind", "execute", "status", "ok"); v != 4 {
		t.Errorf("frontend: execute jobs ok after the kill = %v, want 4", v)
	}
}

// callTraced runs code through execute_code with a W3C traceparent in the
// request's _meta and returns the job id.
func callTraced(t testing.TB, c interface {
	CallTool(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error)
}, code string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = "execute_code"
	req.Params.Arguments = map[string]any{"code": code}
	req.Params.Meta = &mcp.Meta{AdditionalFields: map[string]any{"traceparent": traceparent, "tracestate": "congo=t61rcWkgMzE"}}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var er frontend.ExecResult
	if err := e2e.Decode(res, &er); err != nil || er.Status != "ok" {
		t.Fatalf("traced call: %v %+v", err, er)
	}
	return er.JobID
}

// TestReadinessFollowsNATSAndRedis stops Redis, then NATS, under a running
// frontend and worker (each its own process): /readyz of both answers 503
// naming the service while it is away and 200 again once it is back, and
// /healthz answers 200 throughout.
func TestReadinessFollowsNATSAndRedis(t *testing.T) {
	t.Parallel()
	natsBin := natsServerBinary(t)
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	natsStore := t.TempDir()
	natsProc, natsURL, natsPort, err := e2e.StartNATS(ctx, start(t), natsBin, os.Environ(), natsStore)
	if err != nil {
		t.Fatal(err)
	}
	common := []string{"CODEXEC_NATS_URL=" + natsURL, "CODEXEC_REDIS_URL=" + rs.URL(), "CODEXEC_METRICS_ADDR=127.0.0.1:0"}
	w := &proc{startWorker(t, "worker", codexecEnv(append(common, "CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t))...))}
	workerBase := w.waitFor(t, e2e.MetricsURLRe, time.Minute)
	fe, mcpURL, err := e2e.StartFrontend(ctx, start(t), os.Args[0], codexecEnv(common...))
	if err != nil {
		t.Fatal(err)
	}
	frontendBase := strings.TrimSuffix(mcpURL, "/mcp")
	frontendMetrics := (&proc{fe}).waitFor(t, e2e.MetricsURLRe, time.Minute)
	bases := []string{workerBase, frontendBase, frontendMetrics}

	ready := func(want int, failing string) {
		t.Helper()
		for _, base := range bases {
			pollUntil(t, time.Minute, base+"/readyz answering "+strings.TrimSpace(failing), func() bool {
				code, body := status(t, base, "/readyz")
				return code == want && strings.Contains(body, failing)
			})
			if code, body := status(t, base, "/healthz"); code != 200 {
				t.Errorf("GET %s/healthz = %d %s while the services come and go, want 200", base, code, body)
			}
		}
	}
	ready(200, `"ready"`)

	rs.Stop()
	ready(503, `"redis"`)
	if v, _ := scrape(t, workerBase).Value("codexec_check_up", "check", "redis"); v != 0 {
		t.Errorf("codexec_check_up{check=redis} = %v with Redis stopped, want 0", v)
	}
	rs.Restart(t)
	ready(200, `"ready"`)

	natsProc.Kill()
	<-natsProc.Exited()
	ready(503, `"nats"`)
	if v, _ := scrape(t, frontendBase).Value("codexec_check_up", "check", "nats"); v != 0 {
		t.Errorf("codexec_check_up{check=nats} = %v with NATS killed, want 0", v)
	}
	if _, err := e2e.StartNATSAt(ctx, start(t), natsBin, os.Environ(), natsStore, natsPort); err != nil {
		t.Fatal(err)
	}
	ready(200, `"ready"`)
}
