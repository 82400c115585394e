package frontend

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/codefiles"
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

// recv returns the next line the server wrote, decoded, failing on one
// longer than StdioMessageLimit: such a line makes the SDK close the
// connection.
func (s stdioConn) recv(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	line, err := s.out.ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	if len(line) > StdioMessageLimit {
		t.Fatalf("the server wrote a message of %d bytes on stdio, more than the %d a client reads", len(line), StdioMessageLimit)
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
	return serveStdioFrontend(t, newDevFrontend(t, cfg))
}

func serveStdioFrontend(t *testing.T, f *Frontend) stdioConn {
	t.Helper()
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
// error that says to read it in parts, and the connection goes on; read in
// parts, it comes back byte for byte, each piece within a message, also a
// piece asked larger than one. Text that JSON escapes (HTML characters
// take six bytes each) counts as it is written, not as it is stored.
func TestStdioReadOfLargeCodeFileInParts(t *testing.T) {
	t.Parallel()
	c := serveStdio(t, Config{CodeFiles: codefiles.Config{MaxFileBytes: 32 << 20}, AnnounceWait: 100 * time.Millisecond})
	piece := strings.Repeat("x = 1\n", (5<<20)/6)
	html := strings.Repeat("<&>", (2<<20)/3) // 2 MiB stored, 12 MiB as JSON
	for i, f := range []struct{ name, content string }{{"big.py", piece + piece}, {"html.py", html}} {
		if res := c.call(t, 10*i+1, "initialize_code_file", map[string]any{"content": f.content, "filename": f.name}); res.IsError {
			t.Fatalf("initialize: %s", textOf(&res))
		}
		res := c.call(t, 10*i+2, "read_code_file", map[string]any{"file_path": f.name})
		var fr FileResult
		raw, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(raw, &fr); err != nil || !res.IsError || fr.Status != "limit" || fr.Size != int64(len(f.content)) ||
			!strings.Contains(fr.Message, "read it in parts, with offset 0 and length") || textOf(&res) != fr.Message {
			t.Fatalf("whole read of %s over stdio: isError=%v %+v %v", f.name, res.IsError, fr, err)
		}
		var got strings.Builder
		for n := 0; ; n++ {
			res := c.call(t, 10*i+3+n, "read_code_file", map[string]any{"file_path": f.name, "offset": got.Len(), "length": 16 << 20})
			raw, _ := json.Marshal(res.StructuredContent)
			fr := FileResult{}
			if err := json.Unmarshal(raw, &fr); err != nil || res.IsError || fr.Offset != int64(got.Len()) || fr.Length != int64(len(textOf(&res))) || n > 3 {
				t.Fatalf("part %d of %s: isError=%v %+v %v", n, f.name, res.IsError, fr, err)
			}
			got.WriteString(textOf(&res))
			if !fr.More {
				break
			}
		}
		if got.String() != f.content {
			t.Fatalf("%s read in parts: %d bytes, not the file's %d byte for byte", f.name, got.Len(), len(f.content))
		}
	}
}

// No message the stdio server writes passes its limit, whatever the tool
// answers: here, with a limit of 1 MiB, a read of a 2 MiB code file (the
// read's own check is made for the 8 MiB one) arrives cut down to an error
// result, and the connection goes on.
func TestStdioMessagesWithinLimit(t *testing.T) {
	t.Parallel()
	f := newDevFrontend(t, Config{AnnounceWait: 100 * time.Millisecond})
	f.stdioLimit = 1 << 20
	c := serveStdioFrontend(t, f)
	if res := c.call(t, 1, "initialize_code_file", map[string]any{"content": strings.Repeat("x = 1\n", (2<<20)/6), "filename": "big.py"}); res.IsError {
		t.Fatalf("initialize: %s", textOf(&res))
	}
	res := c.call(t, 2, "read_code_file", map[string]any{"file_path": "big.py"})
	if !res.IsError || res.StructuredContent != nil || !strings.Contains(textOf(&res), "more than the 1 MiB one message may carry on stdio") {
		t.Fatalf("isError=%v structured=%v %.300s", res.IsError, res.StructuredContent != nil, textOf(&res))
	}
	if res := c.call(t, 3, "list_code_files", map[string]any{}); res.IsError {
		t.Fatalf("after: %s", textOf(&res))
	}
}
