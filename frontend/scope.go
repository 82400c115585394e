package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/mark3labs/mcp-go/server"
)

// StdioScope is the single session scope of a stdio frontend.
const StdioScope = "local"

// AnonymousScope is the scope of sessionless requests that carry no
// credentials.
const AnonymousScope = "anonymous"

type (
	principalKey struct{}
	identityKey  struct{}
)

// httpContext records who the request comes from: the Identity the Access
// policy authenticated, and, with no authentication, the Authorization
// header (which an authenticating proxy in front may set) for sessionless
// requests.
func httpContext(ctx context.Context, r *http.Request) context.Context {
	// A client of revision 2025-06-18 or later sends the header on every
	// request after initialize; without it, the revision says to assume
	// 2025-03-26.
	v := r.Header.Get("Mcp-Protocol-Version")
	if v == "" {
		v = "2025-03-26"
	}
	ctx = context.WithValue(ctx, protocolHeaderKey{}, v)
	if id, ok := auth.FromContext(r.Context()); ok {
		return context.WithValue(ctx, identityKey{}, identityPart(id))
	}
	if a := authorizationHeader(r); a != "" {
		return context.WithValue(ctx, principalKey{}, "p-"+digest(a))
	}
	return ctx
}

// authorizationHeader is what names an unauthenticated caller: its
// Authorization header, which a proxy in front may set, or all of them,
// one a line, when there are several. Only the first was taken, so where
// a proxy adds its header after the client's, the client chose its scope
// by sending one of its own first.
func authorizationHeader(r *http.Request) string {
	vs := r.Header.Values("Authorization")
	if len(vs) > 1 {
		return strings.Join(vs, "\n")
	}
	return strings.TrimSpace(r.Header.Get("Authorization"))
}

// identityPart is an Identity as a part of a scope's hashed input, each
// name prefixed by its length, so that no two identities write the same.
func identityPart(id auth.Identity) string {
	return "id\x00" + strconv.Itoa(len(id.Tenant)) + ":" + id.Tenant + strconv.Itoa(len(id.Principal)) + ":" + id.Principal
}

// scopeFrom derives the session scope of a call: the name under which its
// files, runs, environment and results are kept.
//
//   - stdio: StdioScope, the one local principal.
//   - HTTP with authentication (--auth tokens or jwt): "s-" + hash(tenant,
//     principal, MCP session id), or "p-" + hash(tenant, principal) for a
//     sessionless request. The same session id presented by another
//     principal is another scope, which holds nothing of the first's: the
//     session id alone is no key to anything.
//   - HTTP without authentication: "s-" + hash(session id), or for a
//     sessionless request "p-" + hash(Authorization header) when there is
//     one, else AnonymousScope.
//
// The result always satisfies wire.ValidScope: client-chosen strings are
// hashed, never used as names.
//
// A task's tool runs with its task's scope in ctx (runTask), which wins.
func scopeFrom(ctx context.Context, stdio bool) string {
	if scope, ok := ctx.Value(taskScopeKey{}).(string); ok {
		return scope
	}
	sid := ""
	if s := server.ClientSessionFromContext(ctx); s != nil {
		sid = s.SessionID()
	}
	if client, ok := clientSessionID(ctx); ok {
		sid = client // the transport's is bound to the caller (bindSessions)
	}
	return scopeOf(ctx, stdio, sid)
}

// scopeOf is scopeFrom for a request of MCP session sessionID ("" for a
// sessionless request).
func scopeOf(ctx context.Context, stdio bool, sessionID string) string {
	if stdio {
		return StdioScope
	}
	who, authenticated := ctx.Value(identityKey{}).(string)
	if sessionID != "" {
		if authenticated {
			return "s-" + digest(who+"\x00session\x00"+sessionID)
		}
		return "s-" + digest(sessionID)
	}
	if authenticated {
		return "p-" + digest(who)
	}
	if p, ok := ctx.Value(principalKey{}).(string); ok {
		return p
	}
	return AnonymousScope
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}
