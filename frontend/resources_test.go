package frontend

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
)

// resources/read errors carry the protocol's codes, not mcp-go's internal
// error (-32603) for whatever a resource handler returns: a URI that names
// no file of a workspace, or names a handle badly, is invalid params; a
// URI outside the workspace template is mcp-go's own resource not found.
// (A file that is not there, -32002 with the URI in data, needs a worker:
// the end-to-end file tests check it.)
func TestResourceReadErrorCodes(t *testing.T) {
	t.Parallel()
	c := serveStdio(t, Config{AnnounceWait: 100 * time.Millisecond})
	for i, tc := range []struct {
		uri  string
		code int
		says string
	}{
		{"codexec://workspace/../etc/passwd", mcp.INVALID_PARAMS, "leaves the working directory"},
		{"codexec://workspace/a.txt?offset=-1", mcp.INVALID_PARAMS, "offset must be a number"},
		{"codexec://workspace/a.txt?workspace=nope", mcp.INVALID_PARAMS, "not a workspace handle"},
		{"codexec://workspace/a.txt?workspace=wsp_aaaaaaaaaaaaaaaaaaaaaaaaaa", mcp.INVALID_PARAMS, "no workspace"},
		{"file:///etc/passwd", mcp.RESOURCE_NOT_FOUND, "file:///etc/passwd"},
	} {
		c.send(t, map[string]any{"jsonrpc": "2.0", "id": i + 1, "method": "resources/read", "params": map[string]any{"uri": tc.uri}})
		m := c.recv(t)
		var e rpcError
		if err := json.Unmarshal(m["error"], &e); err != nil || e.Code != tc.code || !strings.Contains(e.Message, tc.says) || string(m["id"]) != strconv.Itoa(i+1) {
			t.Errorf("read %s: id %s error %s; want code %d saying %q", tc.uri, m["id"], m["error"], tc.code, tc.says)
		}
	}
}
