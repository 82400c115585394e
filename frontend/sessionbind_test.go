package frontend

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// Alice learns Bob's MCP session id and opens its GET stream with her own
// token; Bob then makes calls whose first progress notification names
// their job. Every one of them reaches Bob, none reaches Alice. Before
// bindSessions her stream was the session's own (the transport keyed it by
// the id alone) and took notifications of Bob's calls, their output as it
// streams included.
func TestHTTPSessionIDOfAnotherPrincipalStreamsNothing(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: fx.f.cfg.Pool})
	if err := fx.f.store.Touch(t.Context(), fx.f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	bob, err := fx.connectVersion(t, legacyVersion, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	bobNotes := make(chan string, 64)
	bob.OnNotification(func(n mcp.JSONRPCNotification) {
		msg, _ := n.Params.AdditionalFields["message"].(string)
		bobNotes <- msg
	})
	if bob.GetSessionId() == "" {
		t.Fatal("bob's session has no id")
	}
	stolen := aliceListens(t, fx, bob.GetSessionId())

	ctx, cancel := context.WithCancel(context.Background())
	var calls sync.WaitGroup
	t.Cleanup(func() { cancel(); calls.Wait() })
	const n = 2 // the fair share of one live worker: later calls wait unannounced
	got := 0
	for i := range n {
		calls.Go(func() {
			req := mcp.CallToolRequest{}
			req.Params.Name, req.Params.Arguments = "execute_code", map[string]any{"code": "print('bob's secret')"}
			req.Params.Meta = &mcp.Meta{ProgressToken: i}
			_, _ = bob.CallTool(ctx, req)
		})
		select {
		case <-bobNotes:
			got++
		case msg := <-stolen:
			t.Errorf("alice's stream, on bob's session id, got: %s", msg)
		case <-time.After(10 * time.Second): // a guard against a hang; measures nothing
			t.Fatalf("call %d: no notification reached bob or alice", i)
		}
	}
	if got != n {
		t.Errorf("bob got %d of his %d calls' notifications", got, n)
	}
}

// legacyVersion is a protocol revision with session ids (the latest has
// none, and no GET stream).
const legacyVersion = "2025-06-18"

// aliceListens opens the GET stream of session id sid with alice's token
// and returns the data of each event it carries.
func aliceListens(t *testing.T, fx *authFixture, sid string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fx.url, nil)
	req.Header.Set("Authorization", "Bearer "+fx.tokens["alice"])
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("MCP-Protocol-Version", legacyVersion)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		return nil // refused outright: nothing to receive either
	}
	events := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(data, "notifications/progress") {
				events <- data
			}
		}
	}()
	return events
}

// Initialize after initialize leaves the transport holding no session:
// before forgetInitialized each one's state stayed for a day of idleness,
// 12 KiB of it, so a flood of them grew the frontend without bound. The
// sessions still work: a call with each id runs in its own scope.
func TestHTTPInitializeFloodHoldsNoSessions(t *testing.T) {
	t.Parallel()
	fx := startHTTP(t)
	var sids []string
	for range 20 {
		c, err := client.NewStreamableHttpClient(fx.url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		req := mcp.InitializeRequest{}
		req.Params.ProtocolVersion = legacyVersion
		req.Params.ClientInfo = mcp.Implementation{Name: "flood", Version: "0"}
		if _, err := c.Initialize(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		sids = append(sids, c.GetSessionId())
		if res, _ := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": c.GetSessionId(), "filename": "mine"}); res.IsError {
			t.Fatal(textOf(res))
		}
	}
	if n := fx.f.transportSessions.Load(); n != 0 {
		t.Errorf("after %d initializes the transport holds %d sessions, want 0", len(sids), n)
	}
	c, err := client.NewStreamableHttpClient(fx.url, transport.WithSession(sids[7]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, c, "read_code_file", map[string]any{"file_path": "mine.py"}); res.IsError || textOf(res) != sids[7] {
		t.Errorf("session 7's file, read with its id: %s", textOf(res))
	}
}

// Requests carrying session ids nobody was given (any well-formed one is
// valid on every frontend) leave nothing behind: the transport recorded
// each id's last activity for its idle sweeper, a day long, about 400
// bytes an id, so a caller inventing ids grew the frontend without bound.
// Not parallel: it weighs the heap, which other tests would move.
func TestHTTPInventedSessionIDsHoldNothing(t *testing.T) {
	fx := startHTTP(t)
	const n = 40000
	post := func(sid string) {
		req, _ := http.NewRequest(http.MethodPost, fx.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", legacyVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("ping with session id %s: %d", sid, resp.StatusCode)
		}
	}
	post(newSessionID()) // the server's own first allocations
	before := int64(liveHeap())
	for range n {
		post(newSessionID())
	}
	grew := int64(liveHeap()) - before
	t.Logf("%d requests with invented session ids: the heap grew by %d bytes", n, grew)
	if grew > n*100 {
		t.Errorf("%d requests with invented session ids left %d bytes on the heap (%d each)", n, grew, grew/n)
	}
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("mcp-session-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// A DELETE of a session is answered 405, and the session goes on working:
// its id is valid on every frontend and ends nowhere, so the 200 mcp-go
// gave (the session ended, its id to be refused with 404 from then on)
// was untrue. With or without a session id, the answer says why.
func TestHTTPDeleteOfASessionIsRefusedAndTheSessionLives(t *testing.T) {
	t.Parallel()
	fx := startHTTP(t)
	c, err := client.NewStreamableHttpClient(fx.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = legacyVersion
	req.Params.ClientInfo = mcp.Implementation{Name: "delete", Version: "0"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	sid := c.GetSessionId()
	if res, _ := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": "kept", "filename": "mine"}); res.IsError {
		t.Fatal(textOf(res))
	}
	for _, id := range []string{sid, ""} {
		del, _ := http.NewRequest(http.MethodDelete, fx.url, nil)
		if id != "" {
			del.Header.Set("Mcp-Session-Id", id)
		}
		del.Header.Set("MCP-Protocol-Version", legacyVersion)
		resp, err := http.DefaultClient.Do(del)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, POST" {
			t.Errorf("DELETE with session id %q: %d, Allow %q, want 405 and GET, POST", id, resp.StatusCode, resp.Header.Get("Allow"))
		}
		if !strings.Contains(string(body), "does not end sessions") {
			t.Errorf("DELETE with session id %q answered %s", id, body)
		}
	}
	if res, _ := callTool[FileResult](t, c, "read_code_file", map[string]any{"file_path": "mine.py"}); res.IsError || textOf(res) != "kept" {
		t.Errorf("after the DELETE, the session's file: %s", textOf(res))
	}
	// Methods the transport does not use: 405, not the 404 of a path
	// that is not there.
	for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodOptions} {
		req, _ := http.NewRequest(m, fx.url, strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, POST" {
			t.Errorf("%s: %d, Allow %q, want 405 and GET, POST", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
}

// An initialize that carries a session id (of its own, or any well-formed
// one) gets a new session from the transport, and that one is dropped too:
// until 2026-12-05 only an initialize without the header was, and one
// client sending initializes with a session id grew a frontend by 205 MiB
// in 4 s (16,000 of them, 13 KiB each, kept for a day).
func TestHTTPInitializeWithASessionIDHoldsNoSession(t *testing.T) {
	t.Parallel()
	fx := startHTTP(t)
	const n = 20
	for i := range n {
		req, _ := http.NewRequest(http.MethodPost, fx.url, strings.NewReader(
			`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+legacyVersion+`","capabilities":{},"clientInfo":{"name":"flood","version":"0"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", newSessionID())
		req.Header.Set("MCP-Protocol-Version", legacyVersion)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Fatalf("initialize %d with a session id: %d, session %q", i, resp.StatusCode, resp.Header.Get("Mcp-Session-Id"))
		}
	}
	if held := fx.f.transportSessions.Load(); held != 0 {
		t.Errorf("after %d initializes that carried a session id the transport holds %d sessions, want 0", n, held)
	}
}
