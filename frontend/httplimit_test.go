package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/statestore"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// These tests run the frontend's real HTTP handler on a real HTTP server
// (no broker: the code-file tools need none) and talk to it over TCP, raw
// where the test must control how much of a body is sent.

type httpFixture struct {
	f       *Frontend
	url     string // of /mcp
	addr    string
	maxBody int64
	largest atomic.Int64 // the largest Content-Length the server was sent
}

func startHTTP(t *testing.T, opts ...func(*Config)) *httpFixture {
	t.Helper()
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// Code files of up to 1 MiB: the largest legal request is 6 MiB plus
	// framing, above the 1 MiB of a large request.
	cfg := Config{MaxCodeBytes: 512 << 10, CodeFiles: codefiles.Config{MaxFileBytes: 1 << 20, MaxFiles: 4}}
	for _, o := range opts {
		o(&cfg)
	}
	f, err := New(cfg, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	fx := &httpFixture{f: f, maxBody: f.cfg.MaxRequestBytes}
	if want := int64(6<<20 + requestFraming); fx.maxBody != want {
		t.Fatalf("MaxRequestBytes %d, want %d", fx.maxBody, want)
	}
	h, mcpHTTP := f.HTTPHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			old := fx.largest.Load()
			if r.ContentLength <= old || fx.largest.CompareAndSwap(old, r.ContentLength) {
				break
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		_ = mcpHTTP.Shutdown(context.Background())
		srv.CloseClientConnections()
		srv.Close()
	})
	fx.url, fx.addr = srv.URL+"/mcp", strings.TrimPrefix(srv.URL, "http://")
	return fx
}

// rawPost opens a connection and sends a POST to /mcp with these extra
// headers and the first part of its body; the test writes the rest, or not.
func (fx *httpFixture) rawPost(t *testing.T, headers string, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", fx.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	// A guard against a hang, should the server wait for the rest of the
	// body: it fails the test, it measures nothing.
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	head := "POST /mcp HTTP/1.1\r\nHost: " + fx.addr + "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" + headers + "\r\n"
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	return conn
}

func readResponse(t *testing.T, conn net.Conn) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// checkTooLarge checks a 413 whose body is a JSON-RPC error that names the limit.
func checkTooLarge(t *testing.T, status int, body string, limit int64) {
	t.Helper()
	var msg struct {
		JSONRPC string `json:"jsonrpc"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if status != http.StatusRequestEntityTooLarge {
		t.Fatalf("status %d, want 413: %s", status, body)
	}
	if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.JSONRPC != "2.0" || msg.Error.Code != mcp.INVALID_REQUEST ||
		!strings.Contains(msg.Error.Message, fmt.Sprint(limit)) {
		t.Fatalf("413 body is not a JSON-RPC error naming the limit %d: %s", limit, body)
	}
}

// A body larger than the largest legal request is refused with 413 before
// it is read: the server answers after 64 KiB of a declared size one byte
// over the limit, the rest never sent. The handler once read whole bodies
// into memory, whatever their size, holding about five times each.
func TestHTTPOversizeBodyRefusedUnread(t *testing.T) {
	fx := startHTTP(t)
	conn := fx.rawPost(t, fmt.Sprintf("Content-Length: %d\r\n", fx.maxBody+1), make([]byte, 64<<10))
	status, body := readResponse(t, conn)
	checkTooLarge(t, status, body, fx.maxBody)
}

// A chunked body, which declares no size, is read up to the limit and no
// further: one byte past it the server answers 413, although the body has
// not ended.
func TestHTTPOversizeChunkedBodyRefused(t *testing.T) {
	fx := startHTTP(t)
	conn := fx.rawPost(t, "Transfer-Encoding: chunked\r\n", nil)
	w := bufio.NewWriter(conn)
	chunk := strings.Repeat("x", 1<<20)
	for sent := int64(0); sent <= fx.maxBody; {
		n := min(int64(len(chunk)), fx.maxBody+1-sent)
		fmt.Fprintf(w, "%x\r\n%s\r\n", n, chunk[:n])
		sent += n
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	// No terminating chunk: the body never ends.
	status, body := readResponse(t, conn)
	checkTooLarge(t, status, body, fx.maxBody)
}

// A legal request near the limit still works, through an MCP client: a
// code file of 1 MiB (the file limit) made of '<', which JSON encoding
// (Go's escapes it as \u003c) makes a body of about 6 MiB. A small chunked
// request works too.
func TestHTTPLargestLegalRequestWorks(t *testing.T) {
	fx := startHTTP(t)
	c, err := client.NewStreamableHttpClient(fx.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	content := "#" + strings.Repeat("<", 1<<20-2) + "\n"
	res, fr := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": content, "filename": "big.py"})
	if res.IsError || fr.Size != int64(len(content)) {
		t.Fatalf("initialize_code_file of 1 MiB: isError=%v %+v %s", res.IsError, fr, textOf(res))
	}
	if got := fx.largest.Load(); got < 5<<20 || got > fx.maxBody {
		t.Fatalf("the largest request was %d bytes; the test meant one of about 6 MiB, within %d", got, fx.maxBody)
	}

	// A chunked request, without Content-Length, below the limit.
	conn := fx.rawPost(t, "Transfer-Encoding: chunked\r\n", nil)
	ping := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`
	fmt.Fprintf(conn, "%x\r\n%s\r\n0\r\n\r\n", len(ping), ping)
	if status, body := readResponse(t, conn); status != http.StatusOK || !strings.Contains(body, `"serverInfo"`) {
		t.Fatalf("a small chunked request: status %d: %s", status, body)
	}
}

// Large requests draw on a budget of body bytes (by default one largest
// request's): while one holds it, reading its body, another large one
// waits, unread, and goes on once the first is done. The requests are
// handed to the frontend's body limit (in front of the real MCP handler)
// directly, their bodies fed through pipes, so that the order in which
// they arrive is the test's: over TCP, on a busy machine, the server
// sometimes took the second before the first, and nothing waited.
func TestHTTPConcurrentLargeRequestsBounded(t *testing.T) {
	fx := startHTTP(t)
	l := fx.f.bodies
	full := l.freeNow()
	serve := func(size int64) (*io.PipeWriter, <-chan int) {
		pr, pw := io.Pipe()
		t.Cleanup(func() { _ = pw.Close() })
		req := httptest.NewRequest(http.MethodPost, "/mcp", pr)
		req.ContentLength = size
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		done := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			l.ServeHTTP(rec, req)
			done <- rec.Code
		}()
		return pw, done
	}
	// Polled until it holds; the deadline only guards against a hang.
	until := func(what string, ok func() bool) {
		t.Helper()
		for guard := time.Now().Add(time.Minute); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(guard) {
				t.Fatal(what)
			}
		}
	}
	// A: the largest legal size, its body stalled after 1 MiB.
	a, aDone := serve(fx.maxBody)
	go func() { _, _ = a.Write(make([]byte, 1<<20)) }()
	until("the first large request never drew on the budget", func() bool { return l.freeNow() < full })
	// B: 2 MiB, waits for A, unread.
	b, bDone := serve(2 << 20)
	until("the second large request never waited for the first", func() bool { return l.waiting.Load() == 1 })
	go func() { _, _ = b.Write(make([]byte, 2<<20)); _ = b.Close() }()
	select {
	case code := <-bDone:
		t.Fatalf("B was answered (%d) while A held the budget", code)
	case <-time.After(50 * time.Millisecond):
	}
	go func() { _, _ = a.Write(make([]byte, fx.maxBody-1<<20)); _ = a.Close() }()
	if status := <-aDone; status != http.StatusBadRequest {
		t.Errorf("A (not JSON): status %d, want 400", status)
	}
	if status := <-bDone; status != http.StatusBadRequest {
		t.Errorf("B (not JSON): status %d, want 400", status)
	}
	if n := l.waiting.Load(); n != 0 {
		t.Errorf("%d requests still waiting", n)
	}
	if free := l.freeNow(); free != full {
		t.Errorf("budget %d after both, want all of it back (%d)", free, full)
	}
}

// A client that sends its headers and then too little of its body, too
// slowly, is cut off once BodyTimeout has passed: such connections once
// held a frontend's descriptors and buffers for as long as they liked. The
// answer is read under the fixture's one-minute guard, which fails the
// test, and measures nothing, if the server waits for the body for ever.
func TestHTTPSlowBodyCutOff(t *testing.T) {
	fx := startHTTP(t, func(c *Config) { c.BodyTimeout = 200 * time.Millisecond })
	conn := fx.rawPost(t, "Content-Length: 1000\r\n", []byte(`{"jsonrpc":"2.0",`))
	status, _ := readResponse(t, conn)
	if status != http.StatusBadRequest {
		t.Errorf("status %d, want 400 for a body that never came", status)
	}
	// A body sent in time is handled as before, and the connection's
	// deadline is lifted once it is read (the call may then wait long).
	c, err := client.NewStreamableHttpClient(fx.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(t.Context(), mcp.InitializeRequest{}); err != nil {
		t.Fatalf("initialize after a slow body was cut off: %v", err)
	}
}

// Bodies well under a megabyte draw on the budget too: many of them, each
// held while its call is handled, once took a frontend to gigabytes, as
// only bodies above 1 MiB were counted. Here the budget is one largest
// request (6 MiB and framing): six stalled bodies of 1 MiB take it, and
// two more wait, unread.
func TestHTTPManyMediumBodiesBounded(t *testing.T) {
	fx := startHTTP(t)
	for range 8 {
		fx.rawPost(t, fmt.Sprintf("Content-Length: %d\r\n", 1<<20), make([]byte, 64<<10))
	}
	for guard := time.Now().Add(time.Minute); fx.f.bodies.waiting.Load() != 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("%d of 8 bodies of 1 MiB waited for the budget, want 2", fx.f.bodies.waiting.Load())
		}
	}
}

// freeNow is the budget left now.
func (l *bodyLimit) freeNow() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.free
}

// A body that holds the budget must keep pace. One connection that
// declared the largest legal body and then sent a byte now and then held
// the whole budget until its body timeout (a minute), so every other
// caller's request over 64 KiB waited that long, and again at each of its
// reconnects. Now such a body is cut off once it falls behind
// minBodyRate (after paceGrace), and the others get their turn.
func TestHTTPDribbledBodyCannotHoldTheBudget(t *testing.T) {
	fx := startHTTP(t)
	fx.f.bodies.paceGrace = 300 * time.Millisecond
	attacker := fx.rawPost(t, fmt.Sprintf("Content-Length: %d\r\n", fx.maxBody), []byte(`{"jsonrpc":"2.0",`))
	go func() {
		for range 300 {
			if _, err := attacker.Write([]byte(" ")); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	for guard := time.Now().Add(time.Minute); fx.f.bodies.freeNow() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatal("the dribbled body never took the budget")
		}
	}

	pad := strings.Repeat("a", 100<<10)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"` + pad + `","version":"0"}}}`
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", fx.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("a 100 KiB request behind a dribbled body: %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a 100 KiB request behind a dribbled body: status %d", resp.StatusCode)
	}
	if status, _ := readResponse(t, attacker); status != http.StatusBadRequest {
		t.Errorf("the dribbled body: status %d, want 400", status)
	}
}

// A request that declares the largest legal body holds the main budget for
// as long as it takes to send it; calls with a few hundred KiB of code draw
// on a budget of their own and do not wait behind it, paced or not. Before,
// a 100 KiB call waited for the dribbled body to be cut off, and with five
// dribbling connections taking turns, up to 20 s. A body above the medium
// size still waits for the main budget.
func TestHTTPMediumRequestsDoNotWaitBehindAHugeBody(t *testing.T) {
	fx := startHTTP(t)
	fx.f.bodies.paceGrace = time.Hour // no pacing: the medium budget alone must let the call through
	full := fx.f.bodies.freeNow()
	attacker := fx.rawPost(t, fmt.Sprintf("Content-Length: %d\r\n", fx.maxBody), []byte(`{"jsonrpc":"2.0",`))
	t.Cleanup(func() { attacker.Close() })
	for guard := time.Now().Add(time.Minute); fx.f.bodies.freeNow() == full; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatal("the huge body never took the budget")
		}
	}
	post := func(ctx context.Context, pad int) (*http.Response, error) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"` +
			strings.Repeat("a", pad) + `","version":"0"}}}`
		req, _ := http.NewRequestWithContext(ctx, "POST", fx.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		return http.DefaultClient.Do(req)
	}
	for _, pad := range []int{100 << 10, 900 << 10} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second) // a guard against a hang; measures nothing
		resp, err := post(ctx, pad)
		cancel()
		if err != nil {
			t.Fatalf("a %d KiB request while a huge body holds the budget: %v", pad>>10, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("a %d KiB request while a huge body holds the budget: status %d", pad>>10, resp.StatusCode)
		}
	}
	// 2 MiB is no medium body: it waits for the main budget, unread.
	go func() {
		resp, err := post(t.Context(), 2<<20)
		if err == nil {
			resp.Body.Close()
		}
	}()
	for guard := time.Now().Add(time.Minute); fx.f.bodies.waiting.Load() != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatal("a 2 MiB request did not wait for the main budget held by the huge body")
		}
	}
}
