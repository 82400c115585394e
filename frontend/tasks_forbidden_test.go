package frontend

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// A task-augmented call of a tool that does not take tasks is refused with
// -32601, as revision 2025-11-25 says, and nothing runs: answered with a
// plain tool result, the TypeScript SDK (waiting for a task) fails to read
// it with a schema error that names nothing.
func TestTaskCallOfToolWithoutTaskSupportRefused(t *testing.T) {
	t.Parallel()
	c := serveStdio(t, Config{AnnounceWait: 100 * time.Millisecond})
	c.send(t, map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": map[string]any{
		"name": "initialize_code_file", "arguments": map[string]any{"content": "x", "filename": "a.py"}, "task": map[string]any{}}})
	m := c.recv(t)
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(m["error"], &e); err != nil || e.Code != mcp.METHOD_NOT_FOUND || !strings.Contains(e.Message, "cannot be called as a task") {
		t.Fatalf("answer %s %s", m["error"], m["result"])
	}
	if res := c.call(t, 2, "list_code_files", map[string]any{}); res.IsError || strings.Contains(textOf(&res), "a.py") {
		t.Fatalf("the refused call ran: %s", textOf(&res))
	}
	// An unknown tool is still mcp-go's to answer.
	c.send(t, map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": map[string]any{"name": "no_such_tool", "task": map[string]any{}}})
	if m := c.recv(t); m["error"] == nil || !strings.Contains(string(m["error"]), "not found") {
		t.Fatalf("unknown tool: %s %s", m["error"], m["result"])
	}
}
