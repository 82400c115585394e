package frontend

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// A job's result whose pictures make it too large for a stdio message
// loses the pictures, says so, and keeps its output; its structured
// content still has the shape execute_code's output schema declares.
func TestStdioResultLosesPicturesFirst(t *testing.T) {
	t.Parallel()
	png := strings.Repeat("p", 2<<20)
	r := &wire.Result{JobID: "01J0000000000000000000000X", Status: wire.StatusOK, Stdout: "hello\n", Message: "exit code 0",
		Images: []wire.Image{{Data: []byte(png), MIMEType: "image/png"}, {Data: []byte(png), MIMEType: "image/png"}, {Data: []byte(png), MIMEType: "image/png"}, {Data: []byte(png), MIMEType: "image/png"}}}
	msg, _ := json.Marshal(mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(7), Result: toolResult(r, "script.py")})
	msg = append(msg, '\n')
	if len(msg) <= StdioMessageLimit {
		t.Fatalf("the test's message is %d bytes, within the limit", len(msg))
	}
	out := fitStdio(msg, StdioMessageLimit, slog.New(slog.DiscardHandler))
	if len(out) > StdioMessageLimit {
		t.Fatalf("%d bytes after fitting", len(out))
	}
	var m struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out, &m); err != nil || m.ID != 7 {
		t.Fatalf("%v: %.300s", err, out)
	}
	res, err := mcp.ParseCallToolResult(&m.Result)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Content {
		if _, ok := c.(mcp.ImageContent); ok {
			t.Fatal("a picture is still there")
		}
	}
	if res.IsError || !strings.HasPrefix(textOf(res), "hello\n") || !strings.Contains(textOf(res), "4 picture(s) left out") {
		t.Fatalf("isError=%v %q", res.IsError, textOf(res))
	}
	var sc map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &sc)
	if sc["images"] != nil || !strings.Contains(sc["picture_notes"].(string), "left out") || sc["stdout"] != "hello\n" || sc["job_id"] != r.JobID {
		t.Fatalf("structured content %v", sc)
	}
	var er ExecResult
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&er); err != nil {
		t.Fatalf("structured content does not decode as ExecResult: %v", err)
	}
}

// A result too large for a stdio message even without pictures becomes an
// error result that says how large it was and names the job, with no
// structured content (a client checks that of a result that is not an
// error against the tool's output schema); another response too large
// becomes a JSON-RPC error of the same id; a notification is dropped.
func TestStdioOversizedMessagesCutDown(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.DiscardHandler)
	r := &wire.Result{JobID: "01J0000000000000000000000Y", Status: wire.StatusOK, Stdout: strings.Repeat("o", 9<<20), Message: "exit code 0"}
	msg, _ := json.Marshal(mcp.JSONRPCResponse{JSONRPC: "2.0", ID: mcp.NewRequestId(8), Result: toolResult(r, "script.py")})
	out := fitStdio(append(msg, '\n'), StdioMessageLimit, log)
	var m struct {
		ID     int             `json:"id"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(out, &m); err != nil || m.ID != 8 || len(out) > StdioMessageLimit {
		t.Fatalf("%v: %.300s", err, out)
	}
	res, err := mcp.ParseCallToolResult(&m.Result)
	if err != nil || !res.IsError || res.StructuredContent != nil || !strings.Contains(textOf(res), "job "+r.JobID) ||
		!strings.Contains(textOf(res), "more than the 8 MiB one message may carry on stdio") {
		t.Fatalf("%v: isError=%v structured=%v %q", err, res.IsError, res.StructuredContent, textOf(res))
	}

	big, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": "r", "result": map[string]any{"contents": []any{map[string]any{"uri": "x", "text": strings.Repeat("t", 9<<20)}}}})
	var e struct {
		ID    string   `json:"id"`
		Error rpcError `json:"error"`
	}
	if out := fitStdio(append(big, '\n'), StdioMessageLimit, log); json.Unmarshal(out, &e) != nil || e.ID != "r" || e.Error.Code != mcp.INTERNAL_ERROR ||
		!strings.Contains(e.Error.Message, "ask for less") {
		t.Fatalf("another response: %.300s", out)
	}
	note, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": map[string]any{"data": strings.Repeat("n", 9<<20)}})
	if out := fitStdio(append(note, '\n'), StdioMessageLimit, log); out != nil {
		t.Fatalf("a notification of %d bytes was written", len(out))
	}
	small := []byte(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n")
	if out := fitStdio(small, StdioMessageLimit, log); string(out) != string(small) {
		t.Fatalf("a small message changed: %s", out)
	}
}
