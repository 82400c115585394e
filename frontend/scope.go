package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"

	"github.com/mark3labs/mcp-go/server"
)

// StdioScope is the single session scope of a stdio frontend.
const StdioScope = "local"

// AnonymousScope is the scope of sessionless requests that carry no
// credentials. Operators who serve several users over HTTP put an
// authenticating proxy in front (see README), so that each user's
// Authorization header gives them a scope of their own.
const AnonymousScope = "anonymous"

type principalKey struct{}

// httpContext records the request's principal (a hash of its Authorization
// header) for sessionless protocol revisions.
func httpContext(ctx context.Context, r *http.Request) context.Context {
	if auth := strings.TrimSpace(r.Header.Get("Authorization")); auth != "" {
		return context.WithValue(ctx, principalKey{}, "p-"+digest(auth))
	}
	return ctx
}

// scopeFrom derives the session scope of a call. The result always satisfies
// wire.ValidScope: client-chosen strings are hashed, never used as names.
func scopeFrom(ctx context.Context, stdio bool) string {
	if stdio {
		return StdioScope
	}
	if s := server.ClientSessionFromContext(ctx); s != nil && s.SessionID() != "" {
		return "s-" + digest(s.SessionID())
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
