package frontend

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// answerFiles runs a worker stand-in that answers the files jobs of jb's
// pool: a read of "a.txt" finds "hi", any other path no file.
func answerFiles(t *testing.T, jb jobBundle) {
	t.Helper()
	c, err := jb.b.Consume(t.Context(), wire.DefaultPool, 1, func(ctx context.Context, d *broker.Delivery) {
		res := &wire.Result{JobID: d.Job.ID, Scope: d.Job.Scope, Status: wire.StatusOK}
		if d.Job.File != nil && d.Job.File.Path == "a.txt" {
			res.Data, _ = json.Marshal(wire.FileData{Path: "a.txt", Size: 2, Data: []byte("hi")})
		} else {
			res.Status, res.Message = wire.StatusError, "read: "+wire.NoFile
		}
		_, _ = jb.b.PutResult(ctx, res)
		_ = d.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
}

// modernMeta is the _meta of a request of revision 2026-07-28, which has
// no initialize: every request names its revision, client and
// capabilities.
func modernMeta() map[string]any {
	return map[string]any{
		mcp.MetaKeyProtocolVersion:    mcp.ProtocolVersion20260728,
		mcp.MetaKeyClientInfo:         map[string]any{"name": "t", "version": "0"},
		mcp.MetaKeyClientCapabilities: map[string]any{},
	}
}

// The methods the frontend answers in front of mcp-go (resources/read of a
// workspace file, the task methods) answer a request of revision
// 2026-07-28 as that revision says, as mcp-go answers the others: every
// result says resultType "complete" and names the server in _meta, a read
// carries the cache hints ttlMs and cacheScope, and a file that is not
// there is invalid params (-32602), over stdio as over HTTP. Without them
// the Python SDK of that revision refused every resources/read result
// (three required fields missing), and read a missing file's -32002 as
// another error. A request of an earlier revision is answered as before.
func TestRouterAnswersModernRequestsInTheirRevision(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	answerFiles(t, jb)
	c := serveStdioFrontend(t, jb.f)

	type result struct {
		ResultType string          `json:"resultType"`
		TTLMs      *int64          `json:"ttlMs"`
		CacheScope string          `json:"cacheScope"`
		Meta       map[string]any  `json:"_meta"`
		Contents   json.RawMessage `json:"contents"`
	}
	ask := func(id int, method string, params map[string]any) (result, *rpcError) {
		t.Helper()
		c.send(t, map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		m := c.recv(t)
		var r result
		if m["error"] != nil {
			var e rpcError
			_ = json.Unmarshal(m["error"], &e)
			return r, &e
		}
		if err := json.Unmarshal(m["result"], &r); err != nil {
			t.Fatal(err)
		}
		return r, nil
	}

	r, e := ask(1, "resources/read", map[string]any{"uri": "codexec://workspace/a.txt", "_meta": modernMeta()})
	if e != nil {
		t.Fatalf("modern resources/read: %+v", e)
	}
	if r.ResultType != "complete" || r.TTLMs == nil || r.CacheScope != string(mcp.CacheScopePrivate) || r.Meta[mcp.MetaKeyServerInfo] == nil || len(r.Contents) == 0 {
		t.Errorf("modern resources/read: resultType %q, ttlMs %v, cacheScope %q, _meta %v", r.ResultType, r.TTLMs, r.CacheScope, r.Meta)
	}
	if _, e := ask(2, "resources/read", map[string]any{"uri": "codexec://workspace/gone.txt", "_meta": modernMeta()}); e == nil || e.Code != mcp.INVALID_PARAMS {
		t.Errorf("modern resources/read of a missing file: %+v, want code %d", e, mcp.INVALID_PARAMS)
	}
	r, e = ask(3, "tasks/list", map[string]any{"_meta": modernMeta()})
	if e != nil || r.ResultType != "complete" || r.Meta[mcp.MetaKeyServerInfo] == nil {
		t.Errorf("modern tasks/list: %+v %+v", r, e)
	}

	r, e = ask(4, "resources/read", map[string]any{"uri": "codexec://workspace/a.txt"})
	if e != nil || r.ResultType != "" || r.TTLMs != nil || r.CacheScope != "" || len(r.Contents) == 0 {
		t.Errorf("legacy resources/read: %+v %+v", r, e)
	}
	if _, e := ask(5, "resources/read", map[string]any{"uri": "codexec://workspace/gone.txt"}); e == nil || e.Code != mcp.RESOURCE_NOT_FOUND {
		t.Errorf("legacy resources/read of a missing file: %+v, want code %d", e, mcp.RESOURCE_NOT_FOUND)
	}
}
