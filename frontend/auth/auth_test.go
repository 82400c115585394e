package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/auth/authtest"
	"github.com/golang-jwt/jwt/v5"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newJWT(t *testing.T, is *authtest.Issuer) *JWT {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	j, err := NewJWT(ctx, JWTConfig{Issuer: is.URL, Audience: authtest.Audience, TenantClaim: "org",
		UnknownKIDEvery: time.Nanosecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func bearerReq(token string) *http.Request {
	r := httptest.NewRequest("POST", "http://127.0.0.1/mcp", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func TestJWTAcceptsValidToken(t *testing.T) {
	is := authtest.NewIssuer(t)
	j := newJWT(t, is)
	id, err := j.Authenticate(bearerReq(is.Sign(t, "k1", nil)))
	if err != nil || id != (Identity{Tenant: "acme", Principal: "alice"}) {
		t.Fatalf("got %+v, %v", id, err)
	}
}

func TestJWTRefusesBadTokens(t *testing.T) {
	is := authtest.NewIssuer(t)
	j := newJWT(t, is)
	hmac, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": is.URL, "aud": authtest.Audience,
		"sub": "alice", "org": "acme", "exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte("secret"))
	for name, token := range map[string]string{
		"expired":         is.Sign(t, "k1", jwt.MapClaims{"exp": time.Now().Add(-2 * time.Minute).Unix()}),
		"no expiry":       is.Sign(t, "k1", jwt.MapClaims{"exp": nil}),
		"wrong audience":  is.Sign(t, "k1", jwt.MapClaims{"aud": "https://other.test/mcp"}),
		"wrong issuer":    is.Sign(t, "k1", jwt.MapClaims{"iss": "https://evil.example"}),
		"not yet valid":   is.Sign(t, "k1", jwt.MapClaims{"nbf": time.Now().Add(10 * time.Minute).Unix()}),
		"no tenant":       is.Sign(t, "k1", jwt.MapClaims{"org": nil}),
		"no subject":      is.Sign(t, "k1", jwt.MapClaims{"sub": ""}),
		"unknown key":     is.Sign(t, "not-published", nil),
		"hmac":            hmac,
		"garbage":         "not.a.jwt",
		"tampered claims": tamper(is.Sign(t, "k1", nil)),
		"crit extension":  is.SignHeader(t, "k1", map[string]any{"crit": []string{"exp-policy"}, "exp-policy": "lax"}, nil),
	} {
		if id, err := j.Authenticate(bearerReq(token)); err == nil {
			t.Errorf("%s: accepted as %+v", name, id)
		}
	}
	// Within the clock skew allowed, an expired token still passes.
	if _, err := j.Authenticate(bearerReq(is.Sign(t, "k1", jwt.MapClaims{"exp": time.Now().Add(-10 * time.Second).Unix()}))); err != nil {
		t.Errorf("token 10s past expiry, within the leeway: %v", err)
	}
}

// tamper changes the payload of a signed token, keeping its signature.
func tamper(token string) string {
	parts := strings.Split(token, ".")
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	payload = []byte(strings.Replace(string(payload), `"alice"`, `"mallory"`, 1))
	parts[1] = base64.RawURLEncoding.EncodeToString(payload)
	return strings.Join(parts, ".")
}

// A key published after the key set was fetched (rotation) is found by
// fetching the set again when a token names it.
//
// The issuer answers after 20 ms, as one across a network does: the refetch
// must not be cut by the limiter's wait bound (it was, at 1 ms, and a
// rotated key was then never found).
func TestJWTKeyRotation(t *testing.T) {
	is := authtest.NewIssuer(t)
	is.Latency = 20 * time.Millisecond
	j := newJWT(t, is)
	before := is.Fetches()
	is.Rotate(t, "k2")
	id, err := j.Authenticate(bearerReq(is.Sign(t, "k2", jwt.MapClaims{"sub": "bob"})))
	if err != nil || id.Principal != "bob" {
		t.Fatalf("token of the rotated key: %+v, %v", id, err)
	}
	if is.Fetches() == before {
		t.Fatal("the key set was not fetched again")
	}
}

// The unknown-key refetch is rate limited: a flood of tokens naming keys
// that do not exist does not make the frontend hammer the issuer.
func TestJWTUnknownKeyRefetchRateLimited(t *testing.T) {
	is := authtest.NewIssuer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	j, err := NewJWT(ctx, JWTConfig{Issuer: is.URL, Audience: authtest.Audience, UnknownKIDEvery: time.Hour, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	before := is.Fetches()
	for i := range 20 {
		if _, err := j.Authenticate(bearerReq(is.Sign(t, "bogus"+string(rune('a'+i)), nil))); err == nil {
			t.Fatal("unknown key accepted")
		}
	}
	if got := is.Fetches() - before; got > 1 {
		t.Fatalf("%d key set fetches for 20 tokens of unknown keys, want at most 1", got)
	}
}

// A request with two Authorization headers is refused, whichever comes
// first: it used to be authenticated as the first, valid one, whatever the
// second said (a proxy in front may have checked or set that one).
func TestTwoAuthorizationHeadersRefused(t *testing.T) {
	a, lineA, _ := NewToken("acme", "alice")
	b, lineB, _ := NewToken("other", "bob")
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, lineA+"\n"+lineB+"\n", time.Now().Add(-time.Hour))
	tok, err := LoadTokens(path, time.Hour, quiet)
	if err != nil {
		t.Fatal(err)
	}
	is := authtest.NewIssuer(t)
	j := newJWT(t, is)
	jwtA := is.Sign(t, "k1", nil)
	for name, c := range map[string]struct {
		a     Authenticator
		first string
	}{
		"tokens, two valid":       {tok, a + "|" + b},
		"tokens, valid then junk": {tok, a + "|junk"},
		"tokens, same twice":      {tok, a + "|" + a},
		"jwt, valid then junk":    {j, jwtA + "|junk"},
	} {
		r := httptest.NewRequest("POST", "http://127.0.0.1/mcp", nil)
		for _, v := range strings.Split(c.first, "|") {
			r.Header.Add("Authorization", "Bearer "+v)
		}
		if id, err := c.a.Authenticate(r); err == nil {
			t.Errorf("%s: accepted as %+v", name, id)
		}
	}
	// One header still passes.
	if _, err := tok.Authenticate(bearerReq(a)); err != nil {
		t.Fatal(err)
	}
}

// A token on two lines naming different identities makes the file
// invalid (the tokens loaded before stay): it was the last line's identity,
// silently. The same line twice is harmless.
func TestTokensFileRefusesOneTokenForTwoIdentities(t *testing.T) {
	a, lineA, _ := NewToken("acme", "alice")
	hash := strings.Fields(lineA)[0]
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, lineA+"\n"+lineA+"\n", time.Now().Add(-time.Hour))
	tok, err := LoadTokens(path, time.Nanosecond, quiet)
	if err != nil {
		t.Fatalf("the same line twice: %v", err)
	}
	if _, err := LoadTokens(path, time.Nanosecond, quiet); err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, lineA+"\n"+hash+" globex mallory\n", time.Now())
	if _, err := LoadTokens(path, time.Nanosecond, quiet); err == nil {
		t.Error("a file giving one token to two identities loaded")
	}
	if id, err := tok.Authenticate(bearerReq(a)); err != nil || id != (Identity{"acme", "alice"}) {
		t.Errorf("after the file gave alice's token to another tenant: %+v, %v", id, err)
	}
}

func writeFile(t *testing.T, path, content string, mod time.Time) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mod, mod); err != nil {
		t.Fatal(err)
	}
}

// A token added to the file is accepted, and one removed refused, without
// a restart: when the file changes, and on Reload (SIGHUP).
func TestTokensFileReload(t *testing.T) {
	a, lineA, _ := NewToken("acme", "alice")
	b, lineB, _ := NewToken("acme", "bob")
	path := filepath.Join(t.TempDir(), "tokens")
	t0 := time.Now().Add(-time.Hour)
	writeFile(t, path, "# tokens\n"+lineA+"\n", t0)
	tok, err := LoadTokens(path, time.Nanosecond, quiet)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := tok.Authenticate(bearerReq(a)); err != nil || id != (Identity{"acme", "alice"}) {
		t.Fatalf("alice: %+v, %v", id, err)
	}
	if _, err := tok.Authenticate(bearerReq(b)); err == nil {
		t.Fatal("bob accepted before his line was added")
	}
	writeFile(t, path, lineB+"\n", t0.Add(time.Minute)) // alice revoked, bob added
	if id, err := tok.Authenticate(bearerReq(b)); err != nil || id.Principal != "bob" {
		t.Fatalf("bob after the file changed: %+v, %v", id, err)
	}
	if _, err := tok.Authenticate(bearerReq(a)); err == nil {
		t.Fatal("alice accepted after her line was removed")
	}
	// A file that no longer parses keeps the tokens loaded.
	writeFile(t, path, "sha256:nothex acme carol\n", t0.Add(2*time.Minute))
	if _, err := tok.Authenticate(bearerReq(b)); err != nil {
		t.Fatalf("bob after a broken file: %v", err)
	}
	// Reload reads the file whatever its time says.
	writeFile(t, path, lineA+"\n", t0.Add(2*time.Minute))
	if err := tok.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := tok.Authenticate(bearerReq(a)); err != nil {
		t.Fatalf("alice after Reload: %v", err)
	}
}

func TestTokensFileRefusesBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	for _, bad := range []string{"sha256:abcd acme alice", "md5:" + strings.Repeat("a", 64) + " acme alice",
		"sha256:" + strings.Repeat("a", 64) + " acme", "sha256:" + strings.Repeat("a", 64) + " acme al\x01ice"} {
		writeFile(t, path, bad+"\n", time.Now())
		if _, err := LoadTokens(path, 0, quiet); err == nil {
			t.Errorf("%q loaded", bad)
		}
	}
}

func serve(t *testing.T, p Policy) *httptest.Server {
	t.Helper()
	p.Logger = quiet
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := FromContext(r.Context())
		_, _ = io.WriteString(w, id.Tenant+"/"+id.Principal)
	})
	srv := httptest.NewServer(p.Handler(next, "/mcp"))
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, method, url string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

// Without valid credentials: 401 with a challenge naming the Protected
// Resource Metadata, which is served and lists the issuer and resource.
func TestPolicyChallengeAndMetadata(t *testing.T) {
	is := authtest.NewIssuer(t)
	srv := serve(t, Policy{Authenticator: newJWT(t, is), AuthorizationServers: []string{is.URL}, Loopback: true})
	resp, body := do(t, "POST", srv.URL+"/mcp", nil)
	want := `Bearer resource_metadata="` + srv.URL + `/.well-known/oauth-protected-resource/mcp"`
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("no credentials: %d %q, want 401 %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), want)
	}
	// The body, which is what a client's error shows, tells a request
	// without credentials from one whose token was refused: until
	// 2026-12-05 both read "authentication required", and a caller with a
	// mistyped token was told to send one.
	if !strings.Contains(body, "authentication required") || !strings.Contains(body, "Authorization: Bearer") {
		t.Errorf("no credentials: body %q, want it to say what to send", body)
	}
	resp, body = do(t, "POST", srv.URL+"/mcp", map[string]string{"Authorization": "Bearer " + is.Sign(t, "k1", jwt.MapClaims{"aud": "x"})})
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Fatalf("wrong audience: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	if !strings.Contains(body, "the token sent was refused") {
		t.Errorf("wrong audience: body %q, want it to say that the token was refused", body)
	}
	for _, path := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, body := do(t, "GET", srv.URL+path, nil)
		var doc struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		if err := json.Unmarshal([]byte(body), &doc); resp.StatusCode != 200 || err != nil {
			t.Fatalf("%s: %d %v %s", path, resp.StatusCode, err, body)
		}
		if doc.Resource != srv.URL+"/mcp" || len(doc.AuthorizationServers) != 1 || doc.AuthorizationServers[0] != is.URL {
			t.Fatalf("%s: %+v", path, doc)
		}
	}
	resp, body = do(t, "POST", srv.URL+"/mcp", map[string]string{"Authorization": "Bearer " + is.Sign(t, "k1", nil)})
	if resp.StatusCode != 200 || body != "acme/alice" {
		t.Fatalf("valid token: %d %q", resp.StatusCode, body)
	}
}

// A page of another origin is refused (DNS rebinding, cross-site calls);
// a client that sends no Origin passes.
func TestPolicyOrigins(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        Policy
		header   map[string]string
		wantCode int
	}{
		{"no origin", Policy{}, nil, 200},
		{"evil origin", Policy{Loopback: true}, map[string]string{"Origin": "http://evil.example"}, 403},
		{"evil origin, open server", Policy{}, map[string]string{"Origin": "http://evil.example"}, 403},
		{"loopback origin on loopback", Policy{Loopback: true}, map[string]string{"Origin": "http://localhost:6274"}, 200},
		{"loopback origin, not on loopback", Policy{}, map[string]string{"Origin": "http://localhost:6274"}, 403},
		{"allowed origin", Policy{AllowedOrigins: []string{"https://app.example"}}, map[string]string{"Origin": "https://app.example"}, 200},
		{"rebound host on loopback", Policy{Loopback: true}, map[string]string{"Host": "evil.example"}, 403},
	} {
		srv := serve(t, tc.p)
		req, _ := http.NewRequest("POST", srv.URL+"/mcp", nil)
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if h, ok := tc.header["Host"]; ok {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.wantCode {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.wantCode)
		}
	}
}
