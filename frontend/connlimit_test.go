package frontend

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/internal/connlimit"
	"github.com/codexec/codexec/statestore"
)

// One client holding every connection the server takes, each with its
// headers sent and its body never, once kept every other caller out (its
// /healthz too) until the body timeout, again and again as it reconnected.
// The frontend's handler tells the listener which requests wait for their
// bodies (connlimit.BodyPending), and a new caller takes the place of the
// oldest of them.
func TestHTTPSlowBodiesCannotTakeEveryConnection(t *testing.T) {
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f, err := New(Config{MaxCodeBytes: 512 << 10, CodeFiles: codefiles.Config{MaxFileBytes: 1 << 20, MaxFiles: 4}, BodyTimeout: time.Hour}, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	h, mcpHTTP := f.HTTPHandler()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const places = 8
	ln := connlimit.New(inner, places)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Hour}
	ln.Hook(srv)
	go srv.Serve(ln)
	t.Cleanup(func() {
		_ = mcpHTTP.Shutdown(context.Background())
		_ = srv.Close()
	})
	addr := inner.Addr().String()

	// The attacker: every place, each a POST whose body never comes.
	for range places {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if _, err := io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: "+addr+"\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
	}
	// A caller with whole requests still gets in (the guard against a hang
	// fails the test; it measures nothing).
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.NewStreamableHttpClient("http://" + addr + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		t.Fatalf("a caller was kept out by connections whose bodies never came: %v", err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v", err)
	}
	if n := ln.Evicted(); n == 0 {
		t.Fatal("no slow connection gave way")
	}
}
