package frontend

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/codexec/codexec/frontend/auth"
)

// Owners of workspaces. The first call of a workspace that a frontend
// serves records, in the hash Keys.ScopeOwners, whose it is (tenant and
// principal, empty without authentication) and when the frontend first
// saw it, for `codexec admin usage` and the collector (gc.go). Each
// frontend writes a workspace's record once while it runs.

// ScopeOwner is the value of Keys.ScopeOwners for one scope.
type ScopeOwner struct {
	Tenant    string    `json:"tenant,omitempty"`
	Principal string    `json:"principal,omitempty"`
	Seen      time.Time `json:"seen"`
}

// maxNotedOwners bounds the scopes a frontend remembers having recorded;
// past it, it forgets them all and records each again on its next call.
const maxNotedOwners = 100_000

// ownersNoted are the scopes whose owner this frontend recorded.
type ownersNoted struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// noteOwner records scope's owner, once per frontend. Best effort: a
// failure is logged, and tried again on the next call.
func (f *Frontend) noteOwner(ctx context.Context, scope string) {
	o := &f.owners
	o.mu.Lock()
	_, done := o.seen[scope]
	if !done {
		if o.seen == nil || len(o.seen) >= maxNotedOwners {
			o.seen = map[string]struct{}{}
		}
		o.seen[scope] = struct{}{}
	}
	o.mu.Unlock()
	if done {
		return
	}
	rec := ScopeOwner{Seen: time.Now().UTC()}
	if id, ok := auth.FromContext(ctx); ok {
		rec.Tenant, rec.Principal = id.Tenant, id.Principal
	}
	data, _ := json.Marshal(rec)
	if _, err := f.store.SetNX(ctx, f.cfg.Keys.ScopeOwner(scope), data, 0); err != nil {
		f.log.Warn("record a workspace's owner", "scope", scope, "err", err)
		o.mu.Lock()
		delete(o.seen, scope)
		o.mu.Unlock()
		return
	}
	if err := f.store.HSet(ctx, f.cfg.Keys.ScopeOwners(), scope, []byte("1")); err != nil {
		f.log.Warn("index a workspace's owner", "scope", scope, "err", err)
	}
}
