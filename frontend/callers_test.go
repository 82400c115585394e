package frontend

import (
	"bytes"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// One principal that opens notification streams until the server holds no
// more (each is a request in progress, which the listener never closes for
// another) is refused past maxCallerRequests; another principal's calls
// still go, and a place given back can be taken again.
func TestHTTPOneCallerCannotHoldEveryPlace(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}
	t.Cleanup(hc.CloseIdleConnections)
	send := func(method, token, session string, body []byte) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, fx.url, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	init := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`, mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	resp := send(http.MethodPost, fx.tokens["alice"], "", init)
	resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || session == "" {
		t.Fatalf("initialize: %s, session %q", resp.Status, session)
	}
	streams := make([]*http.Response, maxCallerRequests)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() { streams[i] = send(http.MethodGet, fx.tokens["alice"], session, nil) })
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range streams {
			s.Body.Close()
		}
	})
	for i, s := range streams {
		if s.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %s", i, s.Status)
		}
	}
	over := send(http.MethodGet, fx.tokens["alice"], session, nil)
	over.Body.Close()
	if over.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("alice's stream %d: %s, want 429", maxCallerRequests+1, over.Status)
	}
	bob, err := fx.connect(t, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, ws := callTool[WorkspaceResult](t, bob, "workspace_info", nil); res.IsError || ws.Status != "ok" {
		t.Fatalf("bob's call while alice holds her share: %s", textOf(res))
	}
	streams[0].Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		again := send(http.MethodGet, fx.tokens["alice"], session, nil)
		if again.StatusCode == http.StatusOK {
			streams[0] = again
			break
		}
		again.Body.Close()
		if time.Now().After(deadline) {
			t.Fatalf("alice's place was not given back when her stream ended: %s", again.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
