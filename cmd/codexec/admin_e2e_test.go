package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
)

// The operator's commands on a cluster: `admin usage` shows a tenant's
// workspace and what it holds; `admin revoke` refuses the principal on
// the frontends and `--undo` lets it in again; `admin gc` removes the
// workspaces unused for --older-than, after which the handle is unknown.
func TestClusterAdminUsageRevokeGC(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA)
	cl := startCluster(t, 1)
	cl.env = append(cl.env, "CODEXEC_AUTH=tokens", "CODEXEC_AUTH_TOKENS="+tokens)
	url := cl.addFrontend(t)
	admin := func(args ...string) string {
		t.Helper()
		return runCodexec(t, codexecEnv(), append([]string{"admin", args[0], "--redis", cl.redisURL}, args[1:]...)...)
	}

	a := connected(t, url, alice)
	if res, _ := callAs[frontend.FileResult](t, a, "initialize_code_file", map[string]any{"content": "x = 1\n", "filename": "a"}); res.IsError {
		t.Fatal(text(res))
	}
	_, ws := callAs[frontend.WorkspaceResult](t, a, "workspace_info", nil)
	if out := admin("usage", "--tenant", "acme"); !strings.Contains(out, "acme") || !strings.Contains(out, "alice") || !strings.Contains(out, "1 workspaces") {
		t.Fatalf("admin usage:\n%s", out)
	}

	if out := admin("revoke", "--tenant", "acme", "--principal", "alice"); !strings.Contains(out, "revoked") || !strings.Contains(out, "cancels the jobs") {
		t.Fatalf("admin revoke:\n%s", out)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := connectAs(url, alice)
		if err != nil && !errors.Is(err, transport.ErrAuthorizationRequired) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice still let in after the revocation: %v", err)
		}
	}
	admin("revoke", "--tenant", "acme", "--principal", "alice", "--undo")
	a2 := eventually(t, func() (*client.Client, error) { return connectAs(url, alice) })
	t.Cleanup(func() { _ = a2.Close() })

	if out := admin("gc", "--older-than", "1ns"); !strings.Contains(out, "removed 1 workspaces") && !strings.Contains(out, "removed 2 workspaces") {
		t.Fatalf("admin gc:\n%s", out)
	}
	res, _ := callAs[frontend.FileResult](t, a2, "read_code_file", map[string]any{"file_path": "a.py", "workspace": ws.Workspace})
	if !res.IsError || !strings.Contains(text(res), "no workspace "+ws.Workspace) {
		t.Fatalf("the handle after the collection: %s", text(res))
	}
}
