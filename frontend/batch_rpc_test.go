package frontend

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// A JSON-RPC batch (an array of messages, which revision 2025-03-26 had
// and later ones dropped) is refused with a message that says so. It was
// answered "request body is not valid json" over HTTP and "Failed to parse
// message" over stdio, about a body that is valid JSON, leaving a client
// of that revision to hunt for an encoding bug.
func TestJSONRPCBatchRefusedSayingWhy(t *testing.T) {
	t.Parallel()
	batch := `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`

	jb := setupJobs(t, Config{})
	url := serveHTTP(t, jb.f)
	for _, body := range []string{batch, "  \n" + batch} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m struct {
			Error rpcError `json:"error"`
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(out, &m) != nil || m.Error.Code != mcp.INVALID_REQUEST || !strings.Contains(m.Error.Message, "batch") {
			t.Errorf("HTTP batch %q: %d %s; want 400, invalid request, saying batch", body[:4], resp.StatusCode, out)
		}
	}

	c := serveStdio(t, Config{AnnounceWait: 100 * time.Millisecond})
	if _, err := c.in.Write([]byte(batch + "\n")); err != nil {
		t.Fatal(err)
	}
	m := c.recv(t)
	var e rpcError
	if err := json.Unmarshal(m["error"], &e); err != nil || e.Code != mcp.INVALID_REQUEST || !strings.Contains(e.Message, "batch") || string(m["id"]) != "null" {
		t.Errorf("stdio batch: id %s error %s; want invalid request saying batch", m["id"], m["error"])
	}
	c.send(t, map[string]any{"jsonrpc": "2.0", "id": 9, "method": "ping"})
	if m := c.recv(t); string(m["id"]) != "9" || m["error"] != nil {
		t.Errorf("a ping after the batch: %v", m)
	}
}
