package cli

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/auth"
)

// Serving without authentication on an address others reach is refused
// before anything starts, with a message that says what to do instead.
func TestAuthNoneRefusedOffLoopback(t *testing.T) {
	t.Parallel()
	never := filepath.Join(t.TempDir(), "never")
	for _, args := range [][]string{
		{"frontend", "--http", "0.0.0.0:0", "--auth", "none", "--nats", "nats://127.0.0.1:1", "--redis", "redis://127.0.0.1:1"},
		{"frontend", "--http", ":0", "--nats", "nats://127.0.0.1:1", "--redis", "redis://127.0.0.1:1"},
		{"dev", "--http", "0.0.0.0:0", "--data-dir", never},
	} {
		var stderr bytes.Buffer
		code := Main(context.Background(), args, strings.NewReader(""), &bytes.Buffer{}, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--allow-open") || !strings.Contains(stderr.String(), "--auth tokens") {
			t.Errorf("%v: exit %d, stderr %q", args, code, stderr.String())
		}
	}
	if _, err := os.Stat(never); err == nil {
		t.Error("dev created its data directory before refusing")
	}
}

func TestAccessPolicyFromFlags(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	ctx := t.Context()
	open := accessFlags{mode: authNone, allowOpen: true}
	if p, err := open.policy(ctx, "0.0.0.0:8080", log); err != nil || p.Authenticator != nil || p.Loopback {
		t.Errorf("--allow-open: %+v, %v", p, err)
	}
	local := accessFlags{mode: authNone, allowedOrigins: "https://a.example, https://b.example"}
	if p, err := local.policy(ctx, "127.0.0.1:8080", log); err != nil || !p.Loopback || len(p.AllowedOrigins) != 2 {
		t.Errorf("loopback: %+v, %v", p, err)
	}
	if _, err := (&accessFlags{mode: authTokens}).policy(ctx, "0.0.0.0:8080", log); err == nil {
		t.Error("--auth tokens without a file accepted")
	}
	if _, err := (&accessFlags{mode: authJWT, jwtIssuer: "https://id.example"}).policy(ctx, "0.0.0.0:8080", log); err == nil {
		t.Error("--auth jwt without an audience accepted")
	}
}

// codexec token prints a token and the line that makes the frontend accept it.
func TestTokenCommand(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"token", "--tenant", "acme", "--principal", "alice"}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var token, line string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "token: "); ok {
			token = v
		}
		if v, ok := strings.CutPrefix(l, "line:  "); ok {
			line = v
		}
	}
	if strings.Contains(line, token) {
		t.Fatalf("the file line holds the token itself: %q", line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(path, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	if id, err := tokens.Authenticate(r); err != nil || id != (auth.Identity{Tenant: "acme", Principal: "alice"}) {
		t.Fatalf("the printed token: %+v, %v", id, err)
	}
	if code := Main(context.Background(), []string{"token"}, nil, &stdout, &stderr); code != 2 {
		t.Errorf("token without --tenant: exit %d", code)
	}
}

// With --auth tokens, SIGHUP reads the token file again.
func TestTokenFileReloadedOnSIGHUP(t *testing.T) {
	_, lineA, _ := auth.NewToken("acme", "alice")
	_, lineB, _ := auth.NewToken("acme", "bob")
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(lineA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	af := accessFlags{mode: authTokens, tokenFile: path}
	p, err := af.policy(t.Context(), "127.0.0.1:0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	tokens := p.Authenticator.(*auth.Tokens)
	if err := os.WriteFile(path, []byte(lineA+"\n"+lineB+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Len reflects reloads only (a request would also look at the file's
	// time): the count changes once the signal is handled.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); tokens.Len() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d tokens after SIGHUP, want 2", tokens.Len())
		}
	}
}
