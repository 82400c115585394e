package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/frontend/auth"
)

// The --auth modes.
const (
	authNone   = "none"
	authTokens = "tokens"
	authJWT    = "jwt"
)

// accessFlags are who may call an HTTP frontend (see docs/security.md).
type accessFlags struct {
	mode           string
	allowOpen      bool
	tokenFile      string
	jwtIssuer      string
	jwtAudience    string
	jwtJWKS        string
	jwtTenantClaim string
	publicURL      string
	allowedOrigins string
}

func (af *accessFlags) register(f *flagenv.Flags) {
	f.Choice(&af.mode, "auth", "CODEXEC_AUTH", authNone, []string{authNone, authTokens, authJWT},
		"who may call over HTTP: none (anyone; only on a loopback address unless --allow-open), tokens (static API tokens of --auth-tokens), jwt (bearer tokens of an OpenID Connect issuer, --jwt-issuer)")
	f.Bool(&af.allowOpen, "allow-open", "CODEXEC_ALLOW_OPEN", false, "with --auth none, listen on a non-loopback address all the same: anyone who reaches it runs code")
	f.String(&af.tokenFile, "auth-tokens", "CODEXEC_AUTH_TOKENS", "", "with --auth tokens: file of lines 'sha256:<hex> TENANT PRINCIPAL' (codexec token writes them), read again on SIGHUP or when it changes")
	f.String(&af.jwtIssuer, "jwt-issuer", "CODEXEC_JWT_ISSUER", "", "with --auth jwt: the issuer URL tokens must name (its keys are found through its OpenID Connect discovery document)")
	f.String(&af.jwtAudience, "jwt-audience", "CODEXEC_JWT_AUDIENCE", "", "with --auth jwt: the audience tokens must name (default: --public-url followed by /mcp)")
	f.String(&af.jwtJWKS, "jwt-jwks-url", "CODEXEC_JWT_JWKS_URL", "", "with --auth jwt: the issuer's key set URL, instead of discovering it")
	f.String(&af.jwtTenantClaim, "jwt-tenant-claim", "CODEXEC_JWT_TENANT_CLAIM", "", "with --auth jwt: the claim naming a token's tenant, which it must then carry (default: one tenant, the issuer)")
	f.String(&af.publicURL, "public-url", "CODEXEC_PUBLIC_URL", "", "the frontend's URL as clients reach it, e.g. https://codexec.example.com, for the OAuth resource metadata (default: from each request's Host)")
	f.String(&af.allowedOrigins, "allowed-origins", "CODEXEC_ALLOWED_ORIGINS", "", "comma-separated browser origins (scheme://host:port) whose pages may call; others are refused with 403 (on a loopback address, loopback origins are allowed too)")
}

// policy checks the settings against the address served (httpAddr) and
// builds the frontend's access policy; with tokens, the file is read again
// on SIGHUP until ctx ends. It refuses, before anything starts, to serve
// without authentication on an address others can reach.
func (af *accessFlags) policy(ctx context.Context, httpAddr string, log *slog.Logger) (auth.Policy, error) {
	loopback := loopbackAddr(httpAddr)
	p := auth.Policy{PublicURL: strings.TrimSuffix(af.publicURL, "/"), AllowedOrigins: commaList(af.allowedOrigins),
		Loopback: loopback, Logger: log}
	switch af.mode {
	case authNone:
		if !loopback && !af.allowOpen {
			return p, flagenv.UsageError{Err: fmt.Errorf("--auth none on %s, which is not a loopback address, would let anyone who reaches it run code: "+
				"choose --auth tokens or --auth jwt, listen on 127.0.0.1, or say --allow-open if an open server is what you want", httpAddr)}
		}
		if !loopback {
			log.Warn("serving without authentication on a non-loopback address (--allow-open): anyone who reaches it runs code", "addr", httpAddr)
		}
	case authTokens:
		if af.tokenFile == "" {
			return p, flagenv.UsageError{Err: errors.New("--auth tokens needs --auth-tokens FILE")}
		}
		tokens, err := auth.LoadTokens(af.tokenFile, 0, log)
		if err != nil {
			return p, err
		}
		reloadOnHangup(ctx, tokens, log)
		p.Authenticator = tokens
	case authJWT:
		aud := af.jwtAudience
		if aud == "" && p.PublicURL != "" {
			aud = p.PublicURL + "/mcp"
		}
		if af.jwtIssuer == "" || aud == "" {
			return p, flagenv.UsageError{Err: errors.New("--auth jwt needs --jwt-issuer, and --jwt-audience or --public-url")}
		}
		j, err := auth.NewJWT(ctx, auth.JWTConfig{Issuer: af.jwtIssuer, Audience: aud, JWKSURL: af.jwtJWKS,
			TenantClaim: af.jwtTenantClaim, Logger: log})
		if err != nil {
			return p, err
		}
		p.Authenticator, p.AuthorizationServers = j, []string{af.jwtIssuer}
	}
	return p, nil
}

// loopbackAddr says whether a listen address (host:port) is on a loopback
// interface only: an empty host or 0.0.0.0 is every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// reloadOnHangup reads the token file again on each SIGHUP until ctx ends.
func reloadOnHangup(ctx context.Context, tokens *auth.Tokens, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := tokens.Reload(); err != nil {
					log.Warn("SIGHUP: token file does not load; keeping the tokens loaded", "err", err)
				}
			}
		}
	}()
}

// runToken prints a new API token and its line for the token file.
func runToken(args []string, stdout, stderr io.Writer) error {
	f := newFlags("token", stderr)
	var tenant, principal string
	f.String(&tenant, "tenant", "", "", "the tenant the token names (required)")
	f.String(&principal, "principal", "", "", "the principal the token names (required)")
	if err := f.Parse(args); err != nil {
		return err
	}
	if tenant == "" || principal == "" {
		return flagenv.UsageError{Err: errors.New("--tenant and --principal are required")}
	}
	token, line, err := auth.NewToken(tenant, principal)
	if err != nil {
		return flagenv.UsageError{Err: err}
	}
	fmt.Fprintf(stdout, "token: %s\nline:  %s\n", token, line)
	return nil
}
