package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"
)

// Identity is who a request comes from: a principal (a user, a service)
// within a tenant (an organisation). Both are non-empty.
type Identity struct {
	Tenant    string
	Principal string
}

// Authenticator names the Identity of a request from its credentials. An
// error means the request is refused with 401; its text is for the logs,
// never for the client.
type Authenticator interface {
	Authenticate(r *http.Request) (Identity, error)
}

// ErrNoToken is the error of a request without a bearer token.
var ErrNoToken = errors.New("auth: no bearer token")

// bearerToken returns the token of an "Authorization: Bearer TOKEN" header.
//
// A request with more than one Authorization header is refused: it is
// malformed (RFC 6750 section 3.1: "uses more than one method for including
// an access token"), and taking one of them would authenticate the request
// as whichever header a client put first, while a proxy in front that
// checked or added another saw a different caller.
func bearerToken(r *http.Request) (string, error) {
	if len(r.Header.Values("Authorization")) > 1 {
		return "", errors.New("auth: more than one Authorization header")
	}
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", ErrNoToken
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", errors.New("auth: the Authorization header is not a bearer token")
	}
	return token, nil
}

type identityKey struct{}

// NewContext returns ctx carrying id.
func NewContext(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// FromContext returns the Identity a Policy authenticated, if any.
func FromContext(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
