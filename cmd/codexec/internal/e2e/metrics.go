package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// MetricsURLRe finds the address of a process's --metrics-addr listener in
// its log.
var MetricsURLRe = regexp.MustCompile(`msg="serving metrics" url=(http://\S+)/metrics`)

// Metrics is one scrape, read by Prometheus' own parser.
type Metrics map[string]*dto.MetricFamily

// Scrape reads base+"/metrics" (base: http://host:port) in the Prometheus
// text format.
func Scrape(ctx context.Context, base string) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("GET %s/metrics: %s: %s", base, resp.Status, body)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse %s/metrics: %w", base, err)
	}
	return Metrics(mf), nil
}

// Value is the value of the series of name whose labels include labels
// (alternating names and values), summed when several match: a counter's
// or gauge's value, a histogram's count. ok is false when none matches.
func (m Metrics) Value(name string, labels ...string) (v float64, ok bool) {
	mf := m[name]
	if mf == nil {
		return 0, false
	}
	for _, s := range mf.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		ok = true
		switch {
		case s.Counter != nil:
			v += s.Counter.GetValue()
		case s.Gauge != nil:
			v += s.Gauge.GetValue()
		case s.Histogram != nil:
			v += float64(s.Histogram.GetSampleCount())
		case s.Untyped != nil:
			v += s.Untyped.GetValue()
		}
	}
	return v, ok
}

// LabelValues lists every label value of every series of the scrape.
func (m Metrics) LabelValues() []string {
	var out []string
	for _, mf := range m {
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

func hasLabels(s *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		found := false
		for _, l := range s.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Get GETs base+path and returns the status code and up to 4 KiB of body.
func Get(ctx context.Context, base, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(body), nil
}
