package frontend

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"

	"github.com/codexec/codexec/frontend/auth"
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
