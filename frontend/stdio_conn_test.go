package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// stdioConn is a client of Frontend.ServeStdio that reads every line the
// server writes, as the TypeScript SDK's stdio client does.
type stdioConn struct {
	in  *io.PipeWriter
	out *bufio.Reader
}

func (s stdioConn) send(t *testing.T, msg map[string]any) {
	t.Helper()
	b, _ := json.Marshal(msg)
	if _, err := s.in.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next line the server wrote, decoded.
func (s stdioConn) recv(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(line, &m); err != nil {
		t.Fatalf("%v: %.200s", err, line)
	}
	return m
}

func (s stdioConn) call(t *testing.T, id int, tool string, args map[string]any) mcp.CallToolResult {
	t.Helper()
	s.send(t, map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	for {
		m := s.recv(t)
		if m["id"] == nil {
			continue // a notification
		}
		if m["error"] != nil {
			t.Fatalf("%s: %s", tool, m["error"])
		}
		raw := m["result"]
		res, err := mcp.ParseCallToolResult(&raw)
		if err != nil {
			t.Fatal(err)
		}
		return *res
	}
}

func serveStdio(t *testing.T, cfg Config) stdioConn {
	t.Helper()
	f := newDevFrontend(t, cfg)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = f.ServeStdio(ctx, inR, outW)
		_ = outW.Close()
	}()
	t.Cleanup(func() {
		_ = inW.Close()
		cancel()
		go func() { _, _ = io.Copy(io.Discard, outR) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the stdio server did not stop")
		}
	})
	c := stdioConn{in: inW, out: bufio.NewReaderSize(outR, 1<<20)}
	c.send(t, map[string]any{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": map[string]any{
		"protocolVersion": mcp.LATEST_PROTOCOL_VERSION, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "0"}}})
	c.recv(t)
	c.send(t, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	return c
}

// A code file larger than a stdio message may carry: reading it whole over
// stdio must not write a line the client cannot take (the TypeScript SDK
// then closes the connection, and the server is gone for it), but a clear
// error, and the connection goes on.
