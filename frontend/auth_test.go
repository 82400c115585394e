package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/auth/authtest"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/golang-jwt/jwt/v5"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// These tests run the frontend's HTTP handler, behind static-token
// authentication, on a real HTTP server with a real in-process JetStream
// and a bbolt state store, and talk to it with mcp-go's Streamable HTTP
// client.

type authFixture struct {
	f      *Frontend
	b      *broker.Broker
	url    string
	tokens map[string]string // principal → token
}

func startAuthHTTP(t testing.TB) *authFixture {
	t.Helper()
	e := brokertest.StartNATS(t)
	b := brokertest.Open(t, e, broker.Config{})
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	fx := &authFixture{b: b, tokens: map[string]string{}}
	var lines []string
	for _, p := range []string{"alice", "bob"} {
		token, line, err := auth.NewToken("acme", p)
		if err != nil {
			t.Fatal(err)
		}
		fx.tokens[p] = token
		lines = append(lines, line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	fx.serve(t, st, tokens)
	return fx
}

// startJWTHTTP is startAuthHTTP accepting the JWTs of is instead.
func startJWTHTTP(t testing.TB, is *authtest.Issuer) *authFixture {
	t.Helper()
	e := brokertest.StartNATS(t)
	b := brokertest.Open(t, e, broker.Config{})
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	j, err := auth.NewJWT(t.Context(), auth.JWTConfig{Issuer: is.URL, Audience: authtest.Audience, TenantClaim: "org"})
	if err != nil {
		t.Fatal(err)
	}
	fx := &authFixture{b: b}
	fx.serve(t, st, j)
	return fx
}

func (fx *authFixture) serve(t testing.TB, st statestore.Store, a auth.Authenticator) {
	t.Helper()
	f, err := New(Config{Access: auth.Policy{Authenticator: a, Loopback: true}}, fx.b, st)
	if err != nil {
		t.Fatal(err)
	}
	fx.f = f
	h, mcpHTTP := f.HTTPHandler()
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		_ = mcpHTTP.Shutdown(context.Background())
		srv.CloseClientConnections()
		srv.Close()
	})
	fx.url = srv.URL + "/mcp"
}

// connect opens an MCP session with these credentials, of the latest
// (sessionless) protocol revision; with session set, it presents that
// session id instead of initializing one.
func (fx *authFixture) connect(t testing.TB, token, session string) (*client.Client, error) {
	return fx.connectVersion(t, mcp.LATEST_PROTOCOL_VERSION, token, session)
}

// connectVersion is connect with the protocol revision to initialize.
func (fx *authFixture) connectVersion(t testing.TB, version, token, session string) (*client.Client, error) {
	t.Helper()
	opts := []transport.StreamableHTTPCOption{}
	if token != "" {
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	}
	var copts []client.ClientOption
	if session != "" {
		opts = append(opts, transport.WithSession(session))
		copts = append(copts, client.WithSession())
	}
	tr, err := transport.NewStreamableHTTP(fx.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c := client.NewClient(tr, copts...)
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(t.Context()); err != nil {
		return nil, err
	}
	if session == "" {
		req := mcp.InitializeRequest{}
		req.Params.ProtocolVersion = version
		req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
		if _, err := c.Initialize(t.Context(), req); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func TestHTTPAuthRequired(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	for name, token := range map[string]string{"no token": "", "unknown token": "cx_nope"} {
		if _, err := fx.connect(t, token, ""); !errors.Is(err, transport.ErrAuthorizationRequired) {
			t.Errorf("%s: %v, want unauthorized", name, err)
		}
	}
	resp, err := http.Post(fx.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	base := strings.TrimSuffix(fx.url, "/mcp")
	metaURL := base + "/.well-known/oauth-protected-resource/mcp"
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Bearer resource_metadata="`+metaURL+`"` {
		t.Fatalf("no credentials: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, err = http.Get(metaURL)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct{ Resource string }
	err = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if err != nil || meta.Resource != fx.url {
		t.Fatalf("resource metadata: %+v, %v", meta, err)
	}
	c, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": "x = 1\n", "filename": "a"}); res.IsError {
		t.Fatalf("alice's call: %s", textOf(res))
	}
}

// With JWTs of an OpenID Connect issuer: a valid token works, wrong or
// expired ones are refused.
func TestHTTPJWT(t *testing.T) {
	t.Parallel()
	is := authtest.NewIssuer(t)
	fx := startJWTHTTP(t, is)
	for name, over := range map[string]jwt.MapClaims{
		"expired":        {"exp": time.Now().Add(-time.Hour).Unix()},
		"wrong audience": {"aud": "https://other.test/mcp"},
		"wrong issuer":   {"iss": "https://evil.example"},
	} {
		if _, err := fx.connect(t, is.Sign(t, "k1", over), ""); !errors.Is(err, transport.ErrAuthorizationRequired) {
			t.Errorf("%s: %v, want unauthorized", name, err)
		}
	}
	c, err := fx.connect(t, is.Sign(t, "k1", nil), "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": "x = 1\n", "filename": "a"}); res.IsError {
		t.Fatalf("a call with a valid JWT: %s", textOf(res))
	}
}

// Bob, presenting Alice's session id with his own token, reaches nothing
// of hers: not her code file, not her job's result; Alice, with the same
// id, reaches both. (A protocol revision with sessions.)
func TestHTTPSessionIDOfAnotherPrincipal(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	alice, err := fx.connectVersion(t, mcp.ProtocolVersion20251125, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, alice, "initialize_code_file", map[string]any{"content": "secret = 1\n", "filename": "a"}); res.IsError {
		t.Fatal(textOf(res))
	}
	session := alice.GetSessionId()
	if session == "" {
		t.Fatal("no session id")
	}
	job := fx.submitUnanswered(t, alice)
	rec, err := fx.b.GetJobRecord(t.Context(), job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.b.PutResult(t.Context(), &wire.Result{JobID: job, Scope: rec.Scope, Status: wire.StatusOK, Stdout: "hers\n"}); err != nil {
		t.Fatal(err)
	}
	if res, er := callTool[ExecResult](t, alice, "get_job_result", map[string]any{"job_id": job}); res.IsError || er.Stdout != "hers\n" {
		t.Fatalf("alice's own result: %s", textOf(res))
	}

	bob, err := fx.connect(t, fx.tokens["bob"], session)
	if err != nil {
		t.Fatal(err)
	}
	res, _ := callTool[FileResult](t, bob, "read_code_file", map[string]any{"file_path": "a.py"})
	if !res.IsError || strings.Contains(textOf(res), "secret") {
		t.Errorf("bob read alice's file: %s", textOf(res))
	}
	res, er := callTool[ExecResult](t, bob, "get_job_result", map[string]any{"job_id": job})
	if !res.IsError || er.Status != "rejected" || er.Stdout != "" {
		t.Errorf("bob read alice's result: %s", textOf(res))
	}
	// Alice, by the same id, still has hers.
	alice2, err := fx.connect(t, fx.tokens["alice"], session)
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, alice2, "read_code_file", map[string]any{"file_path": "a.py"}); res.IsError || textOf(res) != "secret = 1\n" {
		t.Errorf("alice again: %s", textOf(res))
	}
}

// submitUnanswered has c call execute_code with a live worker's presence
// recorded but no worker: the job is queued, and recorded in the caller's
// scope. It returns the job id the first progress notification names; the
// call goes on until the job has a result, which the test puts.
func (fx *authFixture) submitUnanswered(t *testing.T, c *client.Client) string {
	t.Helper()
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: fx.f.cfg.Pool})
	if err := fx.f.store.Touch(t.Context(), fx.f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	notes := make(chan mcp.JSONRPCNotification, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		select {
		case notes <- n:
		default:
		}
	})
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "execute_code", map[string]any{"code": "print(1)"}
		req.Params.Meta = &mcp.Meta{ProgressToken: "call-1"}
		_, _ = c.CallTool(context.Background(), req)
	}()
	for {
		select {
		case n := <-notes:
			msg, _ := n.Params.AdditionalFields["message"].(string)
			if id := regexp.MustCompile(`job ([0-9A-Z]{26})`).FindStringSubmatch(msg); id != nil {
				return id[1]
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no progress notification naming the job")
		}
	}
}

// A browser page of another origin is refused before anything else.
func TestHTTPForeignOriginRefused(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	req, _ := http.NewRequest("POST", fx.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Authorization", "Bearer "+fx.tokens["alice"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Origin http://evil.example: %d, want 403", resp.StatusCode)
	}
}

// Sessionless (the latest protocol revision): each principal has a scope
// of its own, and Bob reaches nothing of Alice's.
func TestHTTPSessionlessPrincipalsApart(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	alice, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, alice, "initialize_code_file", map[string]any{"content": "secret = 1\n", "filename": "a"}); res.IsError {
		t.Fatal(textOf(res))
	}
	bob, err := fx.connect(t, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, bob, "read_code_file", map[string]any{"file_path": "a.py"}); !res.IsError || strings.Contains(textOf(res), "secret") {
		t.Errorf("bob read alice's file: %s", textOf(res))
	}
	if res, _ := callTool[FileResult](t, alice, "read_code_file", map[string]any{"file_path": "a.py"}); res.IsError || textOf(res) != "secret = 1\n" {
		t.Errorf("alice's own file: %s", textOf(res))
	}
}
