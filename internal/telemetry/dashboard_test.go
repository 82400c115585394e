package telemetry

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registered names every series name the code exposes: codexec's own
// metrics (a histogram as its _bucket, _sum and _count series), those a
// Probe reads at scrape time, and the Go runtime's and process's.
func registered(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	descs := make(chan *prometheus.Desc, 256)
	for _, c := range append(ours, probeCollector{}) {
		c.Describe(descs)
	}
	close(descs)
	for d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		names[m[1]] = true
	}
	mfs, err := Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	hist := []prometheus.Collector{queueWait, runTime, endToEnd, envBuildTime}
	for _, h := range hist {
		ch := make(chan *prometheus.Desc, 4)
		h.Describe(ch)
		close(ch)
		for d := range ch {
			base := fqName.FindStringSubmatch(d.String())[1]
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[base+suffix] = true
			}
		}
	}
	return names
}

// TestDashboardNamesRegisteredMetrics reads every expression of the Grafana
// dashboard kept in the repository: each metric it names is one the code
// registers, so that a renamed metric cannot leave an empty panel.
func TestDashboardNamesRegisteredMetrics(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/codexec-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	names := registered(t)
	metric := regexp.MustCompile(`\b(?:codexec|process|go)_[a-z0-9_]+\b`)
	seen := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			found := metric.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			for _, name := range found {
				seen++
				if !names[name] {
					t.Errorf("panel %q: %s is not a metric the code registers", p.Title, name)
				}
			}
		}
	}
	// And the other way: every codexec metric is on a panel (a
	// histogram's name is part of its _bucket series' name).
	for name := range names {
		generated := strings.HasSuffix(name, "_bucket") || strings.HasSuffix(name, "_sum") || strings.HasSuffix(name, "_count")
		if strings.HasPrefix(name, "codexec_") && !generated && !strings.Contains(string(data), name) {
			t.Errorf("metric %s is on no panel of the dashboard", name)
		}
	}
	if seen == 0 {
		t.Fatal("the dashboard names no metric")
	}
}
