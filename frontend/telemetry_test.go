package frontend

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/internal/telemetry"
)

// TestProbeEndpointsOnMCPListener: beside /mcp, behind token
// authentication, /healthz and /readyz answer without credentials (probes
// send none), while /metrics, whose series name tenants, wants a token the
// policy accepts.
func TestProbeEndpointsOnMCPListener(t *testing.T) {
	fx := startAuthHTTP(t)
	base := strings.TrimSuffix(fx.url, "/mcp")
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path, ""); code != http.StatusOK {
			t.Errorf("GET %s without credentials = %d %s, want 200", path, code, body)
		}
	}
	if code, _ := get("/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without credentials = %d, want 401", code)
	}
	if code, _ := get("/metrics", "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a bad token = %d, want 401", code)
	}
	code, body := get("/metrics", fx.tokens["alice"])
	if code != http.StatusOK || !strings.Contains(body, "codexec_check_up{check=\"nats\"} 1") {
		t.Errorf("GET /metrics with a token = %d, want 200 with the checks:\n%.2000s", code, body)
	}
}

// TestNotReadyWhileDraining: a frontend told to stop answers readiness
// 503, naming itself, while its open calls finish.
func TestNotReadyWhileDraining(t *testing.T) {
	fx := startAuthHTTP(t)
	if failing := fx.f.cfg.Probe.Failing(t.Context()); len(failing) != 0 {
		t.Fatalf("before Drain: failing %v", failing)
	}
	fx.f.Drain()
	time.Sleep(1100 * time.Millisecond) // past the probe's one-second cache
	if _, ok := fx.f.cfg.Probe.Failing(t.Context())["frontend"]; !ok {
		t.Fatal("draining, and the frontend check passes")
	}
}

// The MCP listener's /metrics shows a caller its own tenant's series only:
// with every tenant's series, any tenant's token read the names of the
// others and how many jobs they ran for how long.
func TestMetricsOnMCPListenerShowOnlyTheCallersTenant(t *testing.T) {
	fx := startAuthHTTP(t) // alice is of tenant acme
	telemetry.CallFinished("execute", "ok", "acme", time.Now(), time.Second)
	telemetry.CallFinished("execute", "ok", "globex-metrics-test", time.Now(), time.Second)
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(fx.url, "/mcp")+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+fx.tokens["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	tenants := regexp.MustCompile(`tenant="([^"]*)"`).FindAllStringSubmatch(string(body), -1)
	if resp.StatusCode != http.StatusOK || len(tenants) == 0 || !strings.Contains(string(body), "codexec_check_up") {
		t.Fatalf("GET /metrics as alice = %d, want 200 with acme's series:\n%.2000s", resp.StatusCode, body)
	}
	for _, m := range tenants {
		if m[1] != "acme" {
			t.Errorf("alice (tenant acme) reads a series of tenant %q", m[1])
		}
	}
}
