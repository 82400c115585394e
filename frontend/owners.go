package frontend

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/codexec/codexec/frontend/auth"
)

// Owners of workspaces. The first call of a workspace that a frontend
// serves and that stores something there, or whose job is admitted
// (ownerNotedElsewhere, dispatch), records, in the hash Keys.ScopeOwners, whose it is (tenant and
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

// ownersNoted are the scopes whose owner this frontend recorded, and when.
type ownersNoted struct {
	mu    sync.Mutex
	noted map[string]time.Time
}

// batchOwnerRenewal is how often at most a frontend renews a batch's
// owner record while calls submit to the batch.
const batchOwnerRenewal = time.Hour

// noteOwner records scope's owner, once per frontend. Best effort: a
// failure is logged, and tried again on the next call.
func (f *Frontend) noteOwner(ctx context.Context, scope string) { f.writeOwner(ctx, scope, 0) }

// noteBatchOwner records the owner of the batch of scope bscope, and
// renews its time at most every batchOwnerRenewal while calls submit to
// it: a batch records no runs, so without the renewal its age, for the
// collector, would count from its first call, and a batch submitting for
// longer than the workspace ttl would be collected while it runs. The
// record is overwritten, not only created: a batch's scope is derived from
// its caller's identity, so whoever submits to it is its owner.
func (f *Frontend) noteBatchOwner(ctx context.Context, bscope string) {
	f.writeOwner(ctx, bscope, batchOwnerRenewal)
}

// writeOwner writes scope's owner record unless this frontend did: once
// (created only, renew 0), or again once renew has passed (overwritten).
func (f *Frontend) writeOwner(ctx context.Context, scope string, renew time.Duration) {
	o := &f.owners
	now := time.Now().UTC()
	o.mu.Lock()
	last, noted := o.noted[scope]
	due := !noted || renew > 0 && now.Sub(last) >= renew
	if due {
		if o.noted == nil || len(o.noted) >= maxNotedOwners {
			o.noted = map[string]time.Time{}
		}
		o.noted[scope] = now
	}
	o.mu.Unlock()
	if !due {
		return
	}
	rec := ScopeOwner{Seen: now}
	if id, ok := auth.FromContext(ctx); ok {
		rec.Tenant, rec.Principal = id.Tenant, id.Principal
	}
	data, _ := json.Marshal(rec)
	var err error
	if renew > 0 {
		err = f.store.Set(ctx, f.cfg.Keys.ScopeOwner(scope), data, 0)
	} else {
		_, err = f.store.SetNX(ctx, f.cfg.Keys.ScopeOwner(scope), data, 0)
	}
	if err == nil {
		err = f.store.HSet(ctx, f.cfg.Keys.ScopeOwners(), scope, []byte("1"))
	}
	if err != nil {
		f.log.Warn("record a workspace's owner", "scope", scope, "err", err)
		o.mu.Lock()
		delete(o.noted, scope)
		o.mu.Unlock()
	}
}
