// Package auth says who is calling an HTTP frontend, and refuses requests
// from pages that must not call it.
//
// An Authenticator reads a request's bearer token and names its Identity,
// a tenant and a principal: Tokens checks static API tokens against a file
// of their hashes, JWT checks tokens signed by an OpenID Connect issuer.
// Policy wraps the HTTP handler: it refuses a request whose Origin is not
// allowed (403), one without valid credentials (401, with the
// WWW-Authenticate challenge of an OAuth 2.1 resource server), serves the
// Protected Resource Metadata document (RFC 9728), and hands the Identity
// to the handler in the request's context (FromContext).
package auth
