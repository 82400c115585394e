package frontend

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
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
