package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
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

// A request of revision 2026-07-28 or later that mcp-go refuses as
// malformed (a revision it does not know, no client capabilities in
// _meta, an Mcp-Protocol-Version header or Mcp-Method / Mcp-Name header
// that does not match the body) is refused the same way when it is one the
// frontend answers itself (resources/read, a task method, a task-augmented
// call), and creates nothing. The router answered them all: a client of a
// revision not yet written was served tasks and files in one it never
// asked for, where tools/list told it the revision is unsupported.
func TestRouterRefusesMalformedModernRequestsAsMCPGoDoes(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	answerFiles(t, jb)
	url := serveHTTP(t, jb.f)

	post := func(method string, params map[string]any, headers map[string]string) (int, map[string]json.RawMessage) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer carol")
		for k, v := range headers {
			if v != "" {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]json.RawMessage
		out, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%s: %d %s", method, resp.StatusCode, out)
		}
		return resp.StatusCode, m
	}
	// headersOf are the headers a well-formed request of revision v sends.
	headersOf := func(v, method, name string) map[string]string {
		h := map[string]string{mcp.HeaderProtocolVersion: v, mcp.HeaderMethod: method}
		if name != "" {
			h[mcp.HeaderName] = name
		}
		return h
	}
	withMeta := func(p map[string]any, meta map[string]any) map[string]any {
		out := map[string]any{"_meta": meta}
		for k, v := range p {
			out[k] = v
		}
		return out
	}
	future := modernMeta()
	future[mcp.MetaKeyProtocolVersion] = "2099-01-01"
	noCaps := modernMeta()
	delete(noCaps, mcp.MetaKeyClientCapabilities)
	v := mcp.ProtocolVersion20260728

	type request struct {
		method, name string
		params       map[string]any
	}
	read := request{"resources/read", "codexec://workspace/a.txt", map[string]any{"uri": "codexec://workspace/a.txt"}}
	list := request{"tasks/list", "", map[string]any{}}
	task := request{"tools/call", "execute_code", map[string]any{"name": "execute_code", "arguments": map[string]any{"code": "print(1)"}, "task": map[string]any{}}}
	for _, r := range []request{read, list, task} {
		for _, tc := range []struct {
			what    string
			meta    map[string]any
			headers map[string]string
		}{
			{"an unknown revision", future, headersOf("2099-01-01", r.method, r.name)},
			{"no client capabilities", noCaps, headersOf(v, r.method, r.name)},
			{"a header of another revision", modernMeta(), headersOf(mcp.LATEST_LEGACY_PROTOCOL_VERSION, r.method, r.name)},
			{"no Mcp-Method header", modernMeta(), map[string]string{mcp.HeaderProtocolVersion: v, mcp.HeaderName: r.name}},
		} {
			status, m := post(r.method, withMeta(r.params, tc.meta), tc.headers)
			if status != http.StatusBadRequest || m["error"] == nil {
				t.Errorf("%s with %s: %d %s %s; want 400 and an error", r.method, tc.what, status, m["error"], m["result"])
			}
		}
		// The same request, well formed, is answered.
		if status, m := post(r.method, withMeta(r.params, modernMeta()), headersOf(v, r.method, r.name)); status != http.StatusOK || m["error"] != nil {
			t.Errorf("%s well formed: %d %s", r.method, status, m["error"])
		}
	}
	// Only the well-formed task-augmented call made a task.
	_, m := post("tasks/list", withMeta(nil, modernMeta()), headersOf(v, "tasks/list", ""))
	var tasks mcp.ListTasksResult
	if err := json.Unmarshal(m["result"], &tasks); err != nil || len(tasks.Tasks) != 1 {
		t.Errorf("tasks after one well-formed task call: %s", m["result"])
	}

	c := serveStdioFrontend(t, jb.f)
	for i, meta := range []map[string]any{future, noCaps} {
		c.send(t, map[string]any{"jsonrpc": "2.0", "id": 10 + i, "method": "resources/read", "params": withMeta(read.params, meta)})
		if m := c.recv(t); m["error"] == nil {
			t.Errorf("stdio resources/read with _meta %v: %s, want an error", meta, m["result"])
		}
	}
}

// Revision 2026-07-28 gives a JSON-RPC error over HTTP the status that
// says what it is (invalid params 400, method not found 404), as mcp-go
// answers the requests it serves; the router's errors came with 200. A
// request of an earlier revision gets 200, as before.
func TestRouterErrorsCarryTheRevisionsHTTPStatus(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	answerFiles(t, jb)
	url := serveHTTP(t, jb.f)
	legacy := httpSession(t, url)

	post := func(method, name string, params map[string]any, modern bool) (int, *rpcError) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
		req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if modern {
			req.Header.Set(mcp.HeaderProtocolVersion, mcp.ProtocolVersion20260728)
			req.Header.Set(mcp.HeaderMethod, method)
			if name != "" {
				req.Header.Set(mcp.HeaderName, name)
			}
		} else {
			req.Header.Set("Mcp-Session-Id", legacy.GetSessionId())
			req.Header.Set(mcp.HeaderProtocolVersion, mcp.LATEST_LEGACY_PROTOCOL_VERSION)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct {
			Error *rpcError `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m.Error
	}
	with := func(p map[string]any, modern bool) map[string]any {
		if modern {
			p["_meta"] = modernMeta()
		}
		return p
	}
	for _, modern := range []bool{true, false} {
		wantStatus := http.StatusOK
		if modern {
			wantStatus = http.StatusBadRequest
		}
		uri := "codexec://workspace/gone.txt"
		if status, e := post("resources/read", uri, with(map[string]any{"uri": uri}, modern), modern); e == nil || status != wantStatus {
			t.Errorf("modern %v: resources/read of a missing file: %d %+v, want %d and an error", modern, status, e, wantStatus)
		}
		if status, e := post("tasks/get", "", with(map[string]any{"taskId": "01KC0000000000000000000000"}, modern), modern); e == nil || e.Code != mcp.INVALID_PARAMS || status != wantStatus {
			t.Errorf("modern %v: tasks/get of an unknown task: %d %+v, want %d and invalid params", modern, status, e, wantStatus)
		}
		if modern {
			wantStatus = http.StatusNotFound
		}
		if status, e := post("tools/call", "list_contexts", with(map[string]any{"name": "list_contexts", "arguments": map[string]any{}, "task": map[string]any{}}, modern), modern); e == nil || e.Code != mcp.METHOD_NOT_FOUND || status != wantStatus {
			t.Errorf("modern %v: a task of a tool that takes none: %d %+v, want %d and method not found", modern, status, e, wantStatus)
		}
	}
}
