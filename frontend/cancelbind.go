package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"sync"

	"github.com/mark3labs/mcp-go/mcp"
)

// A request of protocol revision 2026-07-28 has no session: mcp-go serves
// each in an ephemeral session whose id is "", and keys the requests that
// notifications/cancelled may cancel by session id and request id, so
// every sessionless request of every caller was filed under ":<id>". A
// caller who posted notifications/cancelled with request id 7 cancelled
// whichever request of id 7 was in progress on the frontend, another
// tenant's included, and with it that request's job (a call whose context
// ends cancels its job). Request ids are small counters in every client,
// so that took a loop over a few numbers.
//
// sessionlessCancels takes that notification from mcp-go for sessionless
// requests: the frontend registers each sessionless request it passes on
// under its caller and id (the caller as scopes name it: the
// authenticated identity, else the Authorization header, else anonymous),
// with a context of its own, and answers a sessionless
// notifications/cancelled itself by cancelling the requests of that id of
// the same caller only. mcp-go never sees the notification, so its shared
// key is never used. Requests of an MCP session keep mcp-go's handling:
// their key holds the session id, bound to the caller (bindSessions).
type sessionlessCancels struct {
	mu       sync.Mutex
	inflight map[string]map[*context.CancelFunc]struct{}
}

// sessionlessMessage is what route reads of a message.
type sessionlessMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params struct {
		RequestID json.RawMessage `json:"requestId"`
		Meta      struct {
			Version string `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
	} `json:"params"`
}

// sessionless tells whether mcp-go serves req, whose body is body, in a
// session without id (protocol revision 2026-07-28 and later, as mcp-go
// decides it: by the header or by the message's _meta), and decodes the
// message when it does.
func sessionless(req *http.Request, body []byte) (sessionlessMessage, bool) {
	var m sessionlessMessage
	header := req.Header.Get(mcp.HeaderProtocolVersion)
	if !mcp.IsModernProtocol(header) && !bytes.Contains(body, []byte(mcp.MetaKeyProtocolVersion)) {
		return m, false
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return m, false // mcp-go refuses it
	}
	return m, mcp.IsModernProtocol(header) || mcp.IsModernProtocol(m.Params.Meta.Version)
}

// requestKey is the key of request id raw of caller: the id as JSON, so
// that 7 and "7" stay apart, and 7 and 7.0 do not.
func requestKey(caller string, raw json.RawMessage) (string, bool) {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return "", false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", false
	}
	return caller + "\x00" + string(b), true
}

// route handles a sessionless request before mcp-go: a
// notifications/cancelled is answered here (handled true, 202 written); a
// request with an id is returned with a context that its caller's
// notifications/cancelled of that id cancels, and done must be called
// once mcp-go has answered it. Anything else is returned as it is.
func (c *sessionlessCancels) route(w http.ResponseWriter, req *http.Request, body []byte) (out *http.Request, done func(), handled bool) {
	m, ok := sessionless(req, body)
	if !ok {
		return req, func() {}, false
	}
	caller := scopeOf(httpContext(req.Context(), req), false, "")
	if m.Method == string(mcp.MethodNotificationCancelled) {
		if key, ok := requestKey(caller, m.Params.RequestID); ok {
			c.cancel(key)
		}
		w.WriteHeader(http.StatusAccepted)
		return req, func() {}, true
	}
	key, ok := requestKey(caller, m.ID)
	if !ok || m.Method == "" {
		return req, func() {}, false
	}
	ctx, cancel := context.WithCancel(req.Context())
	c.mu.Lock()
	if c.inflight == nil {
		c.inflight = map[string]map[*context.CancelFunc]struct{}{}
	}
	set := c.inflight[key]
	if set == nil {
		set = map[*context.CancelFunc]struct{}{}
		c.inflight[key] = set
	}
	set[&cancel] = struct{}{}
	c.mu.Unlock()
	return req.WithContext(ctx), func() {
		c.mu.Lock()
		delete(set, &cancel)
		if len(c.inflight[key]) == 0 {
			delete(c.inflight, key)
		}
		c.mu.Unlock()
		cancel()
	}, false
}

// cancel cancels the requests in progress under key.
func (c *sessionlessCancels) cancel(key string) {
	c.mu.Lock()
	var fns []context.CancelFunc
	for fn := range c.inflight[key] {
		fns = append(fns, *fn)
	}
	c.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}
