// Package authtest runs an OpenID Connect issuer for tests: its discovery
// document and key set served over real HTTP, its keys generated in the
// test and rotated at will, its tokens signed with them.
package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Audience is the audience of the tokens Sign makes unless told otherwise.
const Audience = "https://codexec.test/mcp"

// Issuer is a test OpenID Connect issuer.
type Issuer struct {
	URL string

	srv  *httptest.Server
	mu   sync.Mutex
	keys map[string]*ecdsa.PrivateKey // kid → key, published
	jwks int                          // key set fetches
	// Latency delays every answer of the key set, as a remote issuer's
	// network would. Set it before the issuer is used.
	Latency time.Duration
}

// NewIssuer starts an issuer publishing one key, "k1".
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	is := &Issuer{keys: map[string]*ecdsa.PrivateKey{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": is.URL, "jwks_uri": is.URL + "/jwks"})
	})
	mux.HandleFunc("/jwks", is.serveKeys)
	is.srv = httptest.NewServer(mux)
	is.URL = is.srv.URL
	t.Cleanup(is.srv.Close)
	is.Rotate(t, "k1")
	return is
}

func (is *Issuer) serveKeys(w http.ResponseWriter, r *http.Request) {
	time.Sleep(is.Latency)
	is.mu.Lock()
	defer is.mu.Unlock()
	is.jwks++
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	for kid, k := range is.keys {
		set.Keys = append(set.Keys, map[string]string{"kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
			"x": b64(k.X), "y": b64(k.Y)})
	}
	_ = json.NewEncoder(w).Encode(set)
}

func b64(n *big.Int) string {
	return base64.RawURLEncoding.EncodeToString(n.FillBytes(make([]byte, 32)))
}

// Rotate publishes a new key kid (the old ones stay published).
func (is *Issuer) Rotate(t testing.TB, kid string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	is.keys[kid] = k
	is.mu.Unlock()
}

// Fetches is how many times the key set was fetched.
func (is *Issuer) Fetches() int {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.jwks
}

// Sign returns a token signed by key kid (a key of its own, unpublished,
// if the issuer has none of that id), with these claims over valid ones:
// this issuer, Audience, sub alice, org acme, an hour to live. A nil value
// removes a claim.
func (is *Issuer) Sign(t testing.TB, kid string, over jwt.MapClaims) string {
	t.Helper()
	return is.SignHeader(t, kid, nil, over)
}

// SignHeader is Sign with these parameters added to the token's header.
func (is *Issuer) SignHeader(t testing.TB, kid string, header map[string]any, over jwt.MapClaims) string {
	t.Helper()
	is.mu.Lock()
	k := is.keys[kid]
	is.mu.Unlock()
	if k == nil {
		var err error
		if k, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			t.Fatal(err)
		}
	}
	claims := jwt.MapClaims{"iss": is.URL, "aud": Audience, "sub": "alice", "org": "acme",
		"exp": time.Now().Add(time.Hour).Unix(), "iat": time.Now().Unix()}
	for c, v := range over {
		if v == nil {
			delete(claims, c)
		} else {
			claims[c] = v
		}
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	for h, v := range header {
		tok.Header[h] = v
	}
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
