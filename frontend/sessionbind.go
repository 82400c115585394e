package frontend

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// An MCP session id is no key on its own, at the transport either. The
// Streamable HTTP server keeps, per session id, the session's notification
// channel: the GET stream of that id and every POST of it read from it. A
// scope already differs per principal (scopeOf), but the transport's
// session did not: another principal who presented a victim's session id
// with her own credentials opened the GET stream of the victim's session
// and received the progress notifications of the victim's calls (their
// jobs' output as it streams), and her DELETE of that id tore the victim's
// session down.
//
// bindSessions keys the transport's session by identity as well: on an
// authenticated request, the Mcp-Session-Id the client sent is replaced,
// for the Streamable HTTP server only, by a digest of it and the caller's
// identity, so that each principal presenting one id reaches a session of
// its own, and no principal can name another's (that would take a
// preimage of the digest). The id the client sent is kept in the request's
// context for scopeFrom, so scopes, and everything stored under them, are
// named as before. The session an initialize registers under the id it
// returns is not reached again by name (its later requests carry the bound
// id); the client keeps using the id it was given.

type clientSessionKey struct{}

// bindSessions is the handler in front of the Streamable HTTP server next.
func bindSessions(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sid := r.Header.Get(server.HeaderKeySessionID)
		id, ok := auth.FromContext(r.Context())
		if sid == "" || !ok {
			next.ServeHTTP(w, r)
			return
		}
		if _, err := sessionIDs.Validate(sid); err != nil {
			next.ServeHTTP(w, r) // refused there, as it was
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), clientSessionKey{}, sid))
		r.Header = r.Header.Clone()
		r.Header.Set(server.HeaderKeySessionID, boundSessionID(sid, id))
		next.ServeHTTP(w, r)
	})
}

// boundSessionID is the transport's session id for client session id sid
// presented by id, in the form the session id manager accepts (sessionIDs).
func boundSessionID(sid string, id auth.Identity) string {
	sum := sha256.Sum256([]byte(identityPart(id) + "\x00transport\x00" + sid))
	b := sum[:16]
	return fmt.Sprintf("mcp-session-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// clientSessionID is the session id the client sent, where bindSessions
// replaced it for the transport.
func clientSessionID(ctx context.Context) (string, bool) {
	sid, ok := ctx.Value(clientSessionKey{}).(string)
	return sid, ok
}

// forgetInitialized drops the transport state the Streamable HTTP server
// next keeps for the session id an initialize returns. That state (the
// session's notification channels, about 12 KiB) was kept until the
// session had been idle for a day, so a caller who sent initialize after
// initialize grew the frontend by that much each: 40,000 of them, 17 s of
// one client, took 480 MiB. Nothing needs it: a session id is valid on
// every frontend without it (sessionIDs), a later request of the session
// runs in a session the server makes for it, and a GET stream registers
// one for as long as it is open.
func forgetInitialized(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if r.Method != http.MethodPost {
			return
		}
		// Whatever session id the initialize carried: the transport
		// answers every initialize with a new session, and until
		// 2026-12-05 one that carried the header kept its new session for
		// the day (13 KiB each, 205 MiB from one client in 4 s).
		sid := w.Header().Get(server.HeaderKeySessionID)
		if sid == "" || sid == r.Header.Get(server.HeaderKeySessionID) {
			return
		}
		del, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), http.MethodDelete, r.URL.String(), nil)
		if err != nil {
			return
		}
		del.Host, del.RemoteAddr = r.Host, r.RemoteAddr // as the initialize's, which the server let in
		del.Header.Set(server.HeaderKeySessionID, sid)
		next.ServeHTTP(discardResponse{}, del)
	})
}

// sessionsOutliveDelete answers a DELETE, a client's request to end its
// session, with 405: a session id here is valid on every frontend, checked
// by its form and looked up nowhere (sessionIDs), so no frontend can end it,
// and its files and jobs stay reachable with it. The 200 that mcp-go gave
// said the session was ended, after which the transport's specification
// wants every request of that id refused with 404, while the id went on
// working. 405 is the answer the specification gives a server that does
// not let clients end sessions; the official SDKs take it as such. What
// this frontend's transport held for the id (its GET stream's channel) is
// still dropped, as before.
//
// A method the transport does not use (PUT, PATCH, OPTIONS, ...) is
// answered 405 too, where mcp-go answered 404, as if /mcp did not exist.
func sessionsOutliveDelete(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost:
			next.ServeHTTP(w, r)
			return
		case http.MethodDelete:
		default:
			w.Header().Set("Allow", "GET, POST")
			writeRPCError(w, http.StatusMethodNotAllowed, mcp.INVALID_REQUEST,
				"method "+r.Method+" is not used by MCP's Streamable HTTP transport: send requests with POST, and open a stream with GET")
			return
		}
		if r.Header.Get(server.HeaderKeySessionID) != "" {
			next.ServeHTTP(discardResponse{}, r)
		}
		w.Header().Set("Allow", "GET, POST")
		writeRPCError(w, http.StatusMethodNotAllowed, mcp.INVALID_REQUEST,
			"this server does not end sessions on request: a session id stays valid on every frontend, with its "+
				"files and jobs, until they expire; a client that is done with it just stops using it")
	})
}

// discardResponse is the response to forgetInitialized's own DELETE.
type discardResponse struct{}

func (discardResponse) Header() http.Header         { return http.Header{} }
func (discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (discardResponse) WriteHeader(int)             {}

// countTransportSessions keeps f.transportSessions, the sessions the
// transport of srv holds, up to date.
func (f *Frontend) countTransportSessions(srv *server.MCPServer) {
	hooks := &server.Hooks{}
	hooks.AddOnRegisterSession(func(context.Context, server.ClientSession) { f.transportSessions.Add(1) })
	hooks.AddOnUnregisterSession(func(context.Context, server.ClientSession) { f.transportSessions.Add(-1) })
	server.WithHooks(hooks)(srv)
}
