package auth

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Policy is who may call an HTTP frontend, and from which pages.
type Policy struct {
	// Authenticator checks the credentials of requests to the MCP
	// endpoint. nil: no authentication (every caller is anonymous).
	Authenticator Authenticator
	// AuthorizationServers are listed in the Protected Resource Metadata:
	// the issuers whose tokens are accepted.
	AuthorizationServers []string
	// PublicURL is the frontend's URL as clients reach it (scheme and
	// host, e.g. https://codexec.example.com). Empty: taken from each
	// request (its Host header).
	PublicURL string
	// AllowedOrigins are the browser origins (scheme://host[:port]) whose
	// pages may call. A request with any other Origin header is refused
	// with 403; one without (not a browser) passes.
	AllowedOrigins []string
	// Loopback says that the server listens on a loopback address only:
	// pages of loopback origins (http://localhost:PORT, 127.0.0.1, [::1])
	// may call too, and a Host header that is not a loopback name is
	// refused (DNS rebinding).
	Loopback bool
	Logger   *slog.Logger
}

// The paths of the Protected Resource Metadata (RFC 9728): the plain one,
// and the one suffixed with the MCP endpoint's path.
const metadataPath = "/.well-known/oauth-protected-resource"

// Handler wraps next, whose MCP endpoint is at mcpPath: every request's
// Origin (and, on loopback, Host) is checked; requests to mcpPath must
// authenticate; the metadata document is served.
func (p Policy) Handler(next http.Handler, mcpPath string) http.Handler {
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	if p.Authenticator != nil {
		mux.Handle(mcpPath, p.authenticate(next, mcpPath))
		meta := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.serveMetadata(w, r, mcpPath) })
		mux.Handle("GET "+metadataPath, meta)
		mux.Handle("GET "+metadataPath+mcpPath, meta)
	}
	return p.checkOrigin(mux)
}

// checkOrigin refuses, with 403, a request from a page of an origin not
// allowed, and on a loopback listener one for a host that is not loopback.
func (p Policy) checkOrigin(next http.Handler) http.Handler {
	allowed := make(map[string]bool, len(p.AllowedOrigins))
	for _, o := range p.AllowedOrigins {
		allowed[strings.ToLower(strings.TrimSuffix(o, "/"))] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.Loopback && !loopbackHost(r.Host) {
			p.refuse(w, r, "host not allowed", "host", r.Host)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && !allowed[strings.ToLower(o)] && !(p.Loopback && loopbackOrigin(o)) {
			p.refuse(w, r, "origin not allowed", "origin", o)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (p Policy) refuse(w http.ResponseWriter, r *http.Request, msg, key, val string) {
	p.Logger.Warn("request refused: "+msg, key, val, "remote", r.RemoteAddr)
	http.Error(w, "codexec: "+msg, http.StatusForbidden)
}

// loopbackOrigin: an http(s) origin whose host is loopback.
func loopbackOrigin(origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return loopbackHost(u.Host)
}

// loopbackHost: host[:port] names localhost or a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// authenticate admits requests whose credentials name an Identity, and
// answers the others 401 with the challenge pointing to the metadata.
func (p Policy) authenticate(next http.Handler, mcpPath string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := p.Authenticator.Authenticate(r)
		if err != nil {
			challenge := fmt.Sprintf(`Bearer resource_metadata="%s"`, p.baseURL(r)+metadataPath+mcpPath)
			// The body is what a client's error shows its user: it tells
			// a request without credentials from one whose token was
			// refused (the log says why; the caller is not told).
			msg := "codexec: authentication required: send the header Authorization: Bearer <token>"
			if !errors.Is(err, ErrNoToken) {
				challenge += `, error="invalid_token"`
				msg = "codexec: the token sent was refused (not a token of this server, revoked, or expired): check the Authorization header your client sends"
				p.Logger.Info("request refused: bad credentials", "err", err, "remote", r.RemoteAddr)
			}
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(NewContext(r.Context(), id)))
	})
}

// baseURL is the scheme and host clients reach the frontend at.
func (p Policy) baseURL(r *http.Request) string {
	if p.PublicURL != "" {
		return strings.TrimSuffix(p.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// serveMetadata writes the Protected Resource Metadata (RFC 9728).
func (p Policy) serveMetadata(w http.ResponseWriter, r *http.Request, mcpPath string) {
	doc := struct {
		Resource               string   `json:"resource"`
		AuthorizationServers   []string `json:"authorization_servers,omitempty"`
		BearerMethodsSupported []string `json:"bearer_methods_supported"`
		ResourceName           string   `json:"resource_name"`
	}{p.baseURL(r) + mcpPath, p.AuthorizationServers, []string{"header"}, "codexec"}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(doc)
}
