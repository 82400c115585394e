package auth

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codexec/codexec/frontend/auth/authtest"
)

// The per-request cost of the access policy in front of a handler that
// does nothing: what authentication adds to every MCP request, to set
// beside a call's own cost (docs/performance.md).

func benchPolicy(b *testing.B, p Policy, token string) {
	p.Logger, p.Loopback = quiet, true
	h := p.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), "/mcp")
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"print(1)"}}}`
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "http://127.0.0.1:8080/mcp", strings.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != 200 {
			b.Fatalf("status %d", w.Code)
		}
	}
}

// BenchmarkPolicyNone is the baseline: the origin check and routing only.
func BenchmarkPolicyNone(b *testing.B) { benchPolicy(b, Policy{}, "") }

// BenchmarkPolicyTokens: a static token, among 100 in the file.
func BenchmarkPolicyTokens(b *testing.B) {
	var lines []string
	var token string
	for i := range 100 {
		tok, line, err := NewToken("acme", "p"+string(rune('a'+i%26)))
		if err != nil {
			b.Fatal(err)
		}
		token, lines = tok, append(lines, line)
	}
	path := filepath.Join(b.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		b.Fatal(err)
	}
	tokens, err := LoadTokens(path, 0, quiet)
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, Policy{Authenticator: tokens}, token)
}

// BenchmarkPolicyJWT: an ES256 JWT, its key set cached.
func BenchmarkPolicyJWT(b *testing.B) {
	is := authtest.NewIssuer(b)
	j, err := NewJWT(b.Context(), JWTConfig{Issuer: is.URL, Audience: authtest.Audience, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	benchPolicy(b, Policy{Authenticator: j}, is.Sign(b, "k1", nil))
}
