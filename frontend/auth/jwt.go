package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// JWTConfig configures JWT.
type JWTConfig struct {
	// Issuer is the OpenID Connect issuer: tokens must carry it as "iss".
	Issuer string
	// Audience is this resource: tokens must list it in "aud".
	Audience string
	// JWKSURL is where the issuer's keys are. Default: the jwks_uri of
	// the issuer's discovery document (ISSUER/.well-known/openid-configuration).
	JWKSURL string
	// TenantClaim names the claim holding the tenant; a token without it,
	// as a non-empty string, is refused. Empty: every principal is in the
	// tenant named Issuer.
	TenantClaim string
	// Leeway is the clock skew allowed on exp, nbf and iat. Default 1m.
	Leeway time.Duration
	// RefreshInterval is how often the key set is fetched again. Default 1h.
	RefreshInterval time.Duration
	// UnknownKIDEvery is the least time between two fetches of the key set
	// for a token signed with a key it does not hold (key rotation); a
	// token with an unknown key meanwhile is refused at once. Default 1m.
	UnknownKIDEvery time.Duration
	// Client fetches the discovery document and the keys. Default: one
	// with a 10s timeout.
	Client *http.Client
	Logger *slog.Logger
}

// signingMethods are the asymmetric algorithms accepted: never "none",
// never an HMAC keyed with a public key.
var signingMethods = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// JWT authenticates bearer tokens that are JWTs signed by an OpenID
// Connect issuer: the signature (by a key of the issuer's key set, cached
// and fetched again on rotation), issuer, audience, expiry (required) and
// not-before, with Leeway of clock skew. The principal is "sub".
type JWT struct {
	cfg    JWTConfig
	keys   keyfunc.Keyfunc
	parser *jwt.Parser
}

// unknownKIDFetchMax bounds the refetch of the key set that a token naming
// an unknown key causes.
const unknownKIDFetchMax = 10 * time.Second

// NewJWT fetches the issuer's key set (through discovery unless JWKSURL is
// given) and returns the authenticator. The key set is refreshed until ctx
// ends.
func NewJWT(ctx context.Context, cfg JWTConfig) (*JWT, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("auth: a JWT issuer and audience are required")
	}
	cfg = cfg.withDefaults()
	if cfg.JWKSURL == "" {
		u, err := discoverJWKS(ctx, cfg.Client, cfg.Issuer)
		if err != nil {
			return nil, err
		}
		cfg.JWKSURL = u
	}
	noErr := false // fail now when the key set cannot be fetched
	log := cfg.Logger
	keys, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{cfg.JWKSURL}, keyfunc.Override{
		Client:                    cfg.Client,
		NoErrorReturnFirstHTTPReq: &noErr,
		RefreshInterval:           cfg.RefreshInterval,
		RefreshUnknownKID:         rate.NewLimiter(rate.Every(cfg.UnknownKIDEvery), 1),
		// RateLimitWaitMax bounds both the wait for the limiter and the
		// refetch itself (jwkset runs the refresh under the same
		// deadline): it must cover an issuer's round trip. A limiter
		// whose next fetch is further away than this fails at once
		// (rate.Limiter.Wait), so with UnknownKIDEvery past it a request
		// never waits for the limit.
		RateLimitWaitMax: unknownKIDFetchMax,
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(ctx context.Context, err error) { log.Warn("JWKS refresh failed", "url", u, "err", err) }
		},
	})
	if err != nil {
		return nil, fmt.Errorf("auth: key set of %s: %w", cfg.Issuer, err)
	}
	parser := jwt.NewParser(jwt.WithValidMethods(signingMethods), jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience), jwt.WithExpirationRequired(), jwt.WithLeeway(cfg.Leeway), jwt.WithIssuedAt())
	return &JWT{cfg: cfg, keys: keys, parser: parser}, nil
}

func (c JWTConfig) withDefaults() JWTConfig {
	if c.Leeway <= 0 {
		c.Leeway = time.Minute
	}
	if c.RefreshInterval <= 0 {
		c.RefreshInterval = time.Hour
	}
	if c.UnknownKIDEvery <= 0 {
		c.UnknownKIDEvery = time.Minute
	}
	if c.Client == nil {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Issuer is the issuer tokens must come from.
func (j *JWT) Issuer() string { return j.cfg.Issuer }

// Authenticate implements Authenticator.
func (j *JWT) Authenticate(r *http.Request) (Identity, error) {
	raw, err := bearerToken(r)
	if err != nil {
		return Identity{}, err
	}
	claims := jwt.MapClaims{}
	tok, err := j.parser.ParseWithClaims(raw, claims, j.keys.KeyfuncCtx(r.Context()))
	if err != nil {
		return Identity{}, fmt.Errorf("auth: %w", err)
	}
	// RFC 7515 section 4.1.11: a token whose "crit" header names extensions
	// the recipient does not understand must be refused. codexec
	// understands none, and the library does not look at the header.
	if _, ok := tok.Header["crit"]; ok {
		return Identity{}, errors.New(`auth: token with a "crit" header, whose extensions are not understood`)
	}
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return Identity{}, errors.New("auth: token without sub")
	}
	tenant := j.cfg.Issuer
	if j.cfg.TenantClaim != "" {
		tenant, _ = claims[j.cfg.TenantClaim].(string)
		if tenant == "" {
			return Identity{}, fmt.Errorf("auth: token without the tenant claim %q", j.cfg.TenantClaim)
		}
	}
	return Identity{Tenant: tenant, Principal: sub}, nil
}

// discoverJWKS reads jwks_uri from the issuer's OpenID Connect discovery
// document, which must name the same issuer.
func discoverJWKS(ctx context.Context, client *http.Client, issuer string) (string, error) {
	u := strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("auth: discovery: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("auth: discovery: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("auth: discovery: %s answered %s", u, resp.Status)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return "", fmt.Errorf("auth: discovery document %s: %w", u, err)
	}
	if doc.Issuer != issuer || doc.JWKSURI == "" {
		return "", fmt.Errorf("auth: discovery document %s names issuer %q and jwks_uri %q", u, doc.Issuer, doc.JWKSURI)
	}
	return doc.JWKSURI, nil
}
