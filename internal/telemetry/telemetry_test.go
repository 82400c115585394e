package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func TestFoldCapsDistinctValues(t *testing.T) {
	f := newFold(3)
	for i := range 10 {
		f.value(fmt.Sprint(i))
	}
	if got := f.value("1"); got != "1" {
		t.Errorf("a value among the first three: %q", got)
	}
	if got := f.value("7"); got != Other {
		t.Errorf("a value past the cap: %q, want %q", got, Other)
	}
	if got := clean("a\xffb" + strings.Repeat("c", 100)); len(got) > maxLabelBytes || strings.Contains(got, "\xff") {
		t.Errorf("clean left %q", got)
	}
}

func TestTenantsBounded(t *testing.T) {
	before := testutil.CollectAndCount(tenantJobs)
	for i := range 3 * MaxTenants {
		CallFinished("execute", "ok", fmt.Sprintf("tenant-%d", i), time.Now(), time.Millisecond)
	}
	if n := testutil.CollectAndCount(tenantJobs); n > MaxTenants+1 || n <= before {
		t.Errorf("%d tenant series after %d tenants, want at most %d", n, 3*MaxTenants, MaxTenants+1)
	}
	if v := testutil.ToFloat64(tenantJobs.WithLabelValues(Other)); v < 2*MaxTenants-float64(before) {
		t.Errorf("other = %v", v)
	}
}

func TestReadyzFollowsChecks(t *testing.T) {
	p := NewProbe(nil)
	var down atomic.Bool
	p.AddCheck("redis", func(context.Context) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	})
	srv := httptest.NewServer(p.Handler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("ready: %d %s", code, body)
	}
	down.Store(true)
	p.mu.Lock()
	p.checked = time.Time{} // past the cache
	p.mu.Unlock()
	code, body := get("/readyz")
	if code != 503 || !strings.Contains(body, `"redis"`) || strings.Contains(body, "refused") {
		t.Fatalf("redis down: %d %s, want 503 naming the check and not its error", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("liveness with redis down: %d", code)
	}
	code, body = get("/metrics")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mf, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if code != 200 || err != nil {
		t.Fatalf("metrics: %d %v", code, err)
	}
	if g := mf["codexec_check_up"].GetMetric()[0].GetGauge().GetValue(); g != 0 {
		t.Errorf("codexec_check_up{check=redis} = %v with the check failing", g)
	}
	if g := mf["codexec_ready"].GetMetric()[0].GetGauge().GetValue(); g != 0 {
		t.Errorf("codexec_ready = %v with a check failing", g)
	}
}

func TestQueueDepthReadOncePerSecond(t *testing.T) {
	p := NewProbe(nil)
	var reads atomic.Int32
	p.WatchQueue("default", func(context.Context, string) (uint64, uint64, error) {
		reads.Add(1)
		return 7, 2, nil
	})
	for range 20 {
		if n := testutil.CollectAndCount(probeCollector{p}, "codexec_queue_depth"); n != 1 {
			t.Fatalf("%d queue series", n)
		}
	}
	if n := reads.Load(); n > 2 {
		t.Errorf("20 scrapes read the queue %d times, want once (twice if a second passed)", n)
	}
}

// A caller reads its own tenant's series only: not those of a tenant whose
// name begins with its own (labels were cut to 64 bytes, so a tenant named
// by another's first 64 bytes read that one's series), nor, when it is
// named "other", those of every tenant past the first MaxTenants.
func TestMetricsForTenantKeepsOthersApart(t *testing.T) {
	p := NewProbe(nil)
	prefix := strings.Repeat("t", maxLabelBytes)
	long := prefix + "-second-tenant"
	tenantJobs.WithLabelValues(clean(long)).Add(7)
	tenantJobs.WithLabelValues(Other).Add(5)
	read := func(tenant string) []string {
		rec := httptest.NewRecorder()
		p.MetricsHandlerForTenant(tenant).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		var seen []string
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(line, "codexec_tenant_jobs_total{") {
				seen = append(seen, line)
			}
		}
		return seen
	}
	if got := read(prefix); len(got) != 0 {
		t.Errorf("tenant %q reads %v, another tenant's", prefix, got)
	}
	if got := read(Other); len(got) != 0 {
		t.Errorf("tenant %q reads %v, the series of the tenants past the first %d", Other, got, MaxTenants)
	}
	if got := read(long); len(got) != 1 || !strings.HasSuffix(got[0], " 7") {
		t.Errorf("tenant %q reads %v, want its own series", long, got)
	}
	if a, b := clean(prefix+"a"), clean(prefix+"b"); a == b || len(a) > maxLabelBytes {
		t.Errorf("two long values: %q and %q", a, b)
	}
}

// A caller of one tenant reads no series that counts every tenant's work:
// the pool's jobs, run times, queue, builds and the process's goroutines
// told it, to the call, how much the other tenants ran and when (its own
// series subtracted), which is what get_environment_config stopped telling
// tenants. It reads its own tenant's series and the checks /readyz tells
// anyone.
func TestMetricsForTenantShowsNoPoolWideSeries(t *testing.T) {
	p := NewProbe(nil)
	p.AddCheck("nats", func(context.Context) error { return nil })
	CallFinished("execute", "ok", "pool-wide-b", time.Now(), time.Second)
	// Labelled directly: the package's other tests may have used up the
	// tenants CallFinished names before it counts them as "other".
	tenantJobs.WithLabelValues(clean("pool-wide-a")).Inc()
	rec := httptest.NewRecorder()
	p.MetricsHandlerForTenant("pool-wide-a").ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	own, foreign := 0, []string{}
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.Contains(line, `tenant="pool-wide-a"`):
			own++
		case strings.HasPrefix(line, "codexec_check_up{") || strings.HasPrefix(line, "codexec_ready "):
		default:
			foreign = append(foreign, line)
		}
	}
	if own == 0 {
		t.Errorf("the tenant reads none of its own series:\n%s", rec.Body.String())
	}
	if len(foreign) > 0 {
		t.Errorf("the tenant reads %d series that are not its own, e.g. %q", len(foreign), foreign[:min(5, len(foreign))])
	}
}
