package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// Revocation. An operator revokes a tenant, or one principal of a tenant,
// with `codexec admin revoke`, which writes the hash Keys.Revoked in the
// state store (field: statestore.RevokedField). Every frontend reads it at
// most once a second, on a request, and refuses each request of a revoked
// identity with 403 before it reaches a tool. WatchRevocations, run beside
// the frontend, reads them every second too, and cancels the jobs of a
// revoked identity that this frontend's calls wait for (broker.CancelJob: a
// queued job never runs, a running one is stopped): with every frontend
// watching, every job of the identity still awaited is stopped. The jobs no
// call waits for are the workers' to stop (worker/revoke.go).

// revokedEvery is how often a frontend reads the revocations again.
const revokedEvery = time.Second

// revocations is a frontend's copy of Keys.Revoked.
type revocations struct {
	mu      sync.Mutex
	read    time.Time
	revoked statestore.Revocations
}

// revoked says whether id is revoked, and since when, reading the
// revocations again when the copy is older than revokedEvery. When the
// store does not answer, the last copy stands.
func (f *Frontend) revoked(r *http.Request, id auth.Identity) (string, bool) {
	rv := &f.revocations
	rv.mu.Lock()
	defer rv.mu.Unlock()
	if time.Since(rv.read) >= revokedEvery {
		f.readRevocations(r.Context())
	}
	return rv.match(id.Tenant, id.Principal)
}

// readRevocations reads the revocations; rv.mu is held.
func (f *Frontend) readRevocations(ctx context.Context) {
	rv := &f.revocations
	m, err := f.store.HGetAll(ctx, f.cfg.Keys.Revoked())
	if err != nil {
		f.log.Warn("revocations unreadable; the last ones read stand", "err", err)
		return
	}
	rv.revoked, rv.read = m, time.Now()
}

// match says whether principal of tenant is revoked, and since when; rv.mu
// is held.
func (rv *revocations) match(tenant, principal string) (string, bool) {
	return rv.revoked.Match(tenant, principal)
}

// awaited are the jobs this frontend's calls wait for, with whose they are
// (admitJob adds, releaseJob removes).
type awaited struct {
	mu   sync.Mutex
	jobs map[string][2]string // job id → tenant, principal
}

func (a *awaited) add(job *wire.Job) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.jobs == nil {
		a.jobs = map[string][2]string{}
	}
	a.jobs[job.ID] = [2]string{job.Tenant, job.Principal}
}

func (a *awaited) remove(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.jobs, id)
}

// WatchRevocations reads the revocations every second until ctx ends, and
// cancels each awaited job of a revoked identity, once.
func (f *Frontend) WatchRevocations(ctx context.Context) {
	t := time.NewTicker(revokedEvery)
	defer t.Stop()
	cancelled := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rv := &f.revocations
		rv.mu.Lock()
		f.readRevocations(ctx)
		var doomed []string
		f.awaiting.mu.Lock()
		for id, who := range f.awaiting.jobs {
			if _, revoked := rv.match(who[0], who[1]); revoked && who[0] != "" && !cancelled[id] {
				doomed = append(doomed, id)
			}
		}
		f.awaiting.mu.Unlock()
		rv.mu.Unlock()
		for _, id := range doomed {
			if err := f.broker.CancelJob(ctx, id); err != nil {
				f.log.Warn("cancel a revoked identity's job", "job", id, "err", err)
				continue
			}
			cancelled[id] = true
			f.log.Info("job of a revoked identity cancelled", "job", id)
		}
	}
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
