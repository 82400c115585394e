package frontend

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// modernPost posts one JSON-RPC message of protocol revision 2026-07-28
// (no session) with token's credentials.
func modernPost(t *testing.T, url, token string, msg map[string]any) *http.Response {
	t.Helper()
	params, _ := msg["params"].(map[string]any)
	if params == nil {
		params = map[string]any{}
		msg["params"] = params
	}
	params["_meta"] = map[string]any{
		mcp.MetaKeyProtocolVersion:    mcp.ProtocolVersion20260728,
		mcp.MetaKeyClientCapabilities: map[string]any{},
		mcp.MetaKeyClientInfo:         map[string]any{"name": "test", "version": "0"},
		"progressToken":               "p",
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
	req.Header.Set(mcp.HeaderMethod, msg["method"].(string))
	if name, ok := params["name"].(string); ok {
		req.Header.Set(mcp.HeaderName, name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

var submittedJob = regexp.MustCompile(`job ([0-9A-Z]{26}) submitted`)

// startSessionlessCall posts a sessionless execute_code of request id id
// as token's caller, and returns the job's id, once the frontend has
// queued it, and the rest of the response.
func startSessionlessCall(t *testing.T, url, token string, id int) (string, *bufio.Reader, io.Closer) {
	t.Helper()
	resp := modernPost(t, url, token, map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "execute_code", "arguments": map[string]any{"code": "print(1)"}}})
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("call: %d %s", resp.StatusCode, b)
	}
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if m := submittedJob.FindStringSubmatch(line); m != nil {
			return m[1], r, resp.Body
		}
		if err != nil {
			t.Fatalf("no job submitted: %v", err)
		}
	}
}

// A sessionless caller's notifications/cancelled cancels its own request
// of that id, never another caller's: before, any caller's cancelled the
// request of that id in progress on the frontend, another tenant's
// included, and its job with it.
func TestSessionlessCancelStaysWithItsCaller(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	advertiseWorker(t, fx.f)
	const id = 7
	job, rest, body := startSessionlessCall(t, fx.url, fx.tokens["alice"], id)
	defer body.Close()
	resp := modernPost(t, fx.url, fx.tokens["bob"], map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": id}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("bob's notification: %d", resp.StatusCode)
	}
	// Answered as a worker would: alice's call gets her job's result.
	if _, err := fx.b.PutResult(t.Context(), &wire.Result{JobID: job, Scope: fx.aliceScope(), Status: wire.StatusOK, Stdout: "alice's\n"}); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(rest)
	if !strings.Contains(string(out), `alice's`) || strings.Contains(string(out), `"cancelled"`) {
		t.Fatalf("alice's call after bob's notifications/cancelled of her request id: %s", out)
	}
	if marked, _ := fx.b.JobCancelled(t.Context(), job); marked {
		t.Fatal("bob's notification left a cancel mark on alice's job")
	}

	// Her own notification cancels her request, and her job.
	job, rest, body = startSessionlessCall(t, fx.url, fx.tokens["alice"], id)
	defer body.Close()
	resp = modernPost(t, fx.url, fx.tokens["alice"], map[string]any{"jsonrpc": "2.0", "method": "notifications/cancelled",
		"params": map[string]any{"requestId": id}})
	resp.Body.Close()
	_, _ = io.ReadAll(rest)
	if marked, err := fx.b.JobCancelled(t.Context(), job); !marked || err != nil {
		t.Fatalf("alice's own notifications/cancelled left no cancel mark: %v", err)
	}
}

// advertiseWorker writes a live worker's presence record for f, so that
// dispatch sends jobs (which nothing consumes).
func advertiseWorker(t *testing.T, f *Frontend) {
	t.Helper()
	jobBundle{f: f}.liveWorker(t)
}

// aliceScope is the scope of alice's sessionless calls.
func (fx *authFixture) aliceScope() string {
	return "p-" + digest(identityPart(auth.Identity{Tenant: "acme", Principal: "alice"}))
}
