package frontend

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/codexec/codexec/frontend/auth"
)

// Revocation. An operator revokes a tenant, or one principal of a tenant,
// with `codexec admin revoke`, which writes the hash Keys.Revoked in the
// state store (field: RevokedField). Every frontend reads it at most once
// a second, on a request, and refuses each request of a revoked identity
// with 403 before it reaches a tool; a call already running goes on, and
// jobs already queued or running run to their end (codexec cannot stop a
// job yet).

// RevokedField is the field of Keys.Revoked that revokes principal of
// tenant, or, with principal "", the whole tenant.
func RevokedField(tenant, principal string) string {
	f, _ := json.Marshal([]string{tenant, principal})
	return string(f)
}

// revokedEvery is how often a frontend reads the revocations again.
const revokedEvery = time.Second

// revocations is a frontend's copy of Keys.Revoked.
type revocations struct {
	mu      sync.Mutex
	read    time.Time
	revoked map[string][]byte
}

// revoked says whether id is revoked, and since when, reading the
// revocations again when the copy is older than revokedEvery. When the
// store does not answer, the last copy stands.
func (f *Frontend) revoked(r *http.Request, id auth.Identity) (string, bool) {
	rv := &f.revocations
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if time.Since(rv.read) >= revokedEvery {
		m, err := f.store.HGetAll(r.Context(), f.cfg.Keys.Revoked())
		if err == nil {
			rv.revoked, rv.read = m, time.Now()
		} else {
			f.log.Warn("revocations unreadable; the last ones read stand", "err", err)
		}
	}
	for _, field := range []string{RevokedField(id.Tenant, ""), RevokedField(id.Tenant, id.Principal)} {
		if at, ok := rv.revoked[field]; ok {
			return string(at), true
		}
	}
	return "", false
}

// refuseRevoked answers 403 to a request whose identity is revoked.
func (f *Frontend) refuseRevoked(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok := auth.FromContext(r.Context())
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		if at, revoked := f.revoked(r, id); revoked {
			msg := fmt.Sprintf("the credentials of tenant %q, principal %q were revoked by the operator (%s)", id.Tenant, id.Principal, at)
			body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32001, "message": msg}})
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write(body)
			return
		}
		next.ServeHTTP(w, r)
	})
}
