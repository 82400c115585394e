package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// codexec dev --http --auth tokens, as a process with its worker and real
// Python: a listed token's calls run, an unlisted one is refused; a line
// added to the token file grants and a line removed revokes, without a
// restart; a page of another origin is refused.
func TestDevHTTPTokens(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	bob, lineB, _ := auth.NewToken("acme", "bob")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA)
	p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t)), os.Args[0],
		"dev", "--http", "127.0.0.1:0", "--auth", "tokens", "--auth-tokens", tokens)
	url := p.waitFor(t, urlRe, 2*time.Minute)

	a, err := connectAs(url, alice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if _, er := call(t, a, "execute_code", map[string]any{"code": "print(1)"}); er.Stdout != "1\n" {
		t.Fatalf("alice's call: %+v", er)
	}
	if _, err := connectAs(url, bob); !errors.Is(err, transport.ErrAuthorizationRequired) {
		t.Fatalf("bob before his line: %v, want unauthorized", err)
	}

	writeTokens(t, tokens, lineB) // bob granted, alice revoked
	b := eventually(t, func() (*client.Client, error) { return connectAs(url, bob) })
	t.Cleanup(func() { _ = b.Close() })
	if _, er := call(t, b, "execute_code", map[string]any{"code": "print(2)"}); er.Stdout != "2\n" {
		t.Fatalf("bob's call: %+v", er)
	}
	if _, err := connectAs(url, alice); !errors.Is(err, transport.ErrAuthorizationRequired) {
		t.Fatalf("alice after her line was removed: %v, want unauthorized", err)
	}

	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Origin", "http://evil.example")
	req.Header.Set("Authorization", "Bearer "+bob)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("Origin http://evil.example: %d, want 403", resp.StatusCode)
	}
}

func writeTokens(t *testing.T, path string, lines ...string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func connectAs(url, token string) (*client.Client, error) {
	return e2e.ConnectHTTP(context.Background(), url, mcp.LATEST_PROTOCOL_VERSION, clientInfo,
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
}

// eventually retries connect until it succeeds (the frontend looks at the
// token file once a second), failing the test after a minute.
func eventually(t *testing.T, connect func() (*client.Client, error)) *client.Client {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := connect()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the token file's change was not taken: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// codexec dev --http --auth tokens with real Python: Alice's working
// directory is reached from a later, sessionless connection by her
// workspace's handle, and only by her: Bob presenting it is told the
// workspace does not exist, and his code sees none of her files.
func TestDevHTTPWorkspaceHandle(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	bob, lineB, _ := auth.NewToken("acme", "bob")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA, lineB)
	p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t)), os.Args[0],
		"dev", "--http", "127.0.0.1:0", "--auth", "tokens", "--auth-tokens", tokens)
	url := p.waitFor(t, urlRe, 2*time.Minute)

	first, err := connectAs(url, alice)
	if err != nil {
		t.Fatal(err)
	}
	if _, er := call(t, first, "execute_code", map[string]any{"code": "open('notes.txt', 'w').write('hers')"}); er.Status != "ok" {
		t.Fatalf("alice's first call: %+v", er)
	}
	_, ws := callAs[frontend.WorkspaceResult](t, first, "workspace_info", nil)
	_ = first.Close()

	later, err := connectAs(url, alice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = later.Close() })
	read := map[string]any{"code": "print(open('notes.txt').read())", "workspace": ws.Workspace}
	if _, er := call(t, later, "execute_code", read); er.Stdout != "hers\n" {
		t.Fatalf("alice, later, by the handle %q: %+v", ws.Workspace, er)
	}
	b, err := connectAs(url, bob)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, er := call(t, b, "execute_code", read); er.Status != "rejected" || !strings.Contains(er.Message, "no workspace "+ws.Workspace) {
		t.Fatalf("bob with alice's handle: %+v", er)
	}
	if _, er := call(t, b, "execute_code", map[string]any{"code": "import os; print(os.listdir('.'))"}); er.Stdout != "[]\n" {
		t.Fatalf("bob's own directory: %+v", er)
	}
}
