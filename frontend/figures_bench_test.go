package frontend

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/codexec/codexec/frontend/auth/authtest"
	"github.com/mark3labs/mcp-go/mcp"
)

// Figures of docs/security.md and docs/operations.md.

// BenchmarkHTTPCallAuth is one tool call (workspace_info: one state-store
// read), through mcp-go's Streamable HTTP client and the frontend's whole
// HTTP stack, without authentication, with a static token, and with an
// ES256 JWT whose key set is cached: the difference between the first and
// the others is what authentication costs a call.
//
//	go test -run '^$' -bench HTTPCallAuth -benchtime 2s -count 3 ./frontend
func BenchmarkHTTPCallAuth(b *testing.B) {
	slog.SetDefault(slog.New(slog.DiscardHandler))
	for _, mode := range []string{"none", "tokens", "jwt"} {
		b.Run(mode, func(b *testing.B) {
			var fx *authFixture
			token := ""
			switch mode {
			case "none":
				fx = startAuthHTTP(b)
				fx.serve(b, fx.f.store, nil) // a second frontend, without authentication
			case "tokens":
				fx = startAuthHTTP(b)
				token = fx.tokens["alice"]
			case "jwt":
				is := authtest.NewIssuer(b)
				fx = startJWTHTTP(b, is)
				token = is.Sign(b, "k1", nil)
			}
			c, err := fx.connect(b, token, "")
			if err != nil {
				b.Fatal(err)
			}
			req := mcp.CallToolRequest{}
			req.Params.Name = "workspace_info"
			for b.Loop() {
				res, err := c.CallTool(context.Background(), req)
				if err != nil || res.IsError {
					b.Fatalf("%v %v", res, err)
				}
			}
		})
	}
}

// BenchmarkFrontendMemoryWorkspaces is the frontend's heap with 10,000
// workspaces, each made by a session of its own (initialize, then
// workspace_info, over raw HTTP, the session left open) and then 10,000
// more made sessionless (new_workspace, through one mcp-go client): the live heap after a collection,
// before and after, per workspace.
//
//	go test -run '^$' -bench FrontendMemoryWorkspaces -benchtime 1x ./frontend
func BenchmarkFrontendMemoryWorkspaces(b *testing.B) {
	const n = 10_000
	slog.SetDefault(slog.New(slog.DiscardHandler))
	for b.Loop() {
		fx := startAuthHTTP(b)
		token := fx.tokens["alice"]
		base := liveHeap()
		for i := range n {
			sid := rawPost(b, fx.url, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+mcp.ProtocolVersion20251125+`","capabilities":{},"clientInfo":{"name":"mem","version":"0"}}}`)
			rawPost(b, fx.url, token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			rawPost(b, fx.url, token, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"workspace_info","arguments":{}}}`, i+2))
		}
		sessions := liveHeap()
		b.Logf("%d workspaces of as many sessions: %d bytes more live heap", n, sessions-base)
		c, err := fx.connect(b, token, "") // one sessionless client, whose own state does not grow
		if err != nil {
			b.Fatal(err)
		}
		req := mcp.CallToolRequest{}
		req.Params.Name = "new_workspace"
		for range n {
			if res, err := c.CallTool(context.Background(), req); err != nil || res.IsError {
				b.Fatalf("new_workspace: %v %v", res, err)
			}
		}
		sessionless := liveHeap()
		b.ReportMetric(float64(sessions-base)/n, "B/session-workspace")
		b.ReportMetric(float64(sessionless-sessions)/n, "B/sessionless-workspace")
		b.ReportMetric(float64(sessions-base)/(1<<20), "MiB/10k-session-workspaces")
	}
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rawPost posts one JSON-RPC message to the MCP endpoint and returns the
// session id the answer names.
func rawPost(tb testing.TB, url, token, session, body string) string {
	tb.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 || strings.Contains(string(out), `"isError":true`) {
		tb.Fatalf("%s: %d %s", body, resp.StatusCode, out)
	}
	return resp.Header.Get("Mcp-Session-Id")
}
