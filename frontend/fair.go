package frontend

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/wire"
)

// Sharing the pool fairly. JetStream hands a pool's jobs to its workers in
// the order they were published, so whoever publishes a thousand jobs at
// once would have them all run before anyone else's next one. The frontend
// therefore admits a job to the queue only while its tenant has fewer than
// its share of jobs there (fairShare: the pool's slots and a few more,
// enough to keep every worker busy while the next job travels). A job over
// the share waits here, unpublished, and is admitted when one of its
// tenant's jobs has its result; the waiting scopes of one tenant take
// turns. So another tenant's job is published behind at most one share of
// the burst, and another scope's job of the same tenant is the next one
// admitted.
//
// A tenant is wire.Job.Tenant, the tenant of the caller's credentials
// (withTenant); without authentication each scope is its own (fairKeys). The share is counted by each frontend for the
// calls it serves, so with F frontends a tenant whose calls are spread
// over all of them can hold F shares; see docs/architecture.md.

// fairGate admits jobs to the queue, per tenant up to a share. The zero
// value is ready to use; its methods may be called concurrently.
type fairGate struct {
	mu      sync.Mutex
	tenants map[string]*tenantQueue
	// admitted maps an admitted job's id to its tenant, until released.
	admitted map[string]string
}

// tenantQueue is one tenant's admitted count and its waiting jobs, one
// FIFO per scope, the scopes served in turn.
type tenantQueue struct {
	running int
	// limit is the share given at the latest admit; 0 admits everything.
	limit  int
	scopes map[string][]*fairWaiter
	// turn lists the scopes with waiting jobs, in the order they are served.
	turn []string
}

// fairWaiter is one job waiting for admission; ready is closed when it is
// admitted.
type fairWaiter struct {
	id    string
	ready chan struct{}
}

// fairKeys returns the keys job is shared fairly by: its tenant (its scope,
// marked apart from tenant names, when it has none) and its scope.
func fairKeys(job *wire.Job) (tenant, scope string) {
	if job.Tenant != "" {
		return "t/" + job.Tenant, job.Scope
	}
	return "s/" + job.Scope, job.Scope
}

// withTenant sets job's tenant (and principal), unless set, to the caller's
// credentials (none on stdio, or over HTTP without authentication).
func withTenant(ctx context.Context, job *wire.Job) {
	if id, ok := auth.FromContext(ctx); ok && job.Tenant == "" {
		job.Tenant, job.Principal = id.Tenant, id.Principal
	}
}

// fairShare is how many jobs of one tenant may be in the queue at once:
// Config.FairShare when set, else the slots of the pool's live workers
// plus a quarter more (at least 2), so that the workers stay busy with one
// tenant alone while the result of one job travels back and the next is
// published, and another tenant's job has few ahead of it. 0 (no limit
// configured, or no presence known) admits every job.
func (f *Frontend) fairShare(adverts []envspec.Advert) int {
	switch {
	case f.cfg.FairShare < 0:
		return 0
	case f.cfg.FairShare > 0:
		return f.cfg.FairShare
	}
	slots := 0
	for _, a := range adverts {
		slots += max(a.Concurrency, 1)
	}
	if slots == 0 {
		return 0
	}
	return slots + max(2, slots/4)
}

// admit returns once job may be published, having counted it against its
// tenant's share (limit; 0 admits at once). It fails when ctx ends or the
// job's deadline passes first; the job was then not admitted. A job
// admitted must be released (release), which happens by itself at its
// deadline plus grace if nobody does it sooner.
func (g *fairGate) admit(ctx context.Context, job *wire.Job, limit int, grace time.Duration) error {
	tenant, scope := fairKeys(job)
	g.mu.Lock()
	t := g.tenant(tenant)
	t.limit = limit
	if limit <= 0 || (t.running < limit && len(t.turn) == 0) {
		g.grant(tenant, t, job.ID)
		g.mu.Unlock()
		g.expire(job, grace)
		return nil
	}
	w := &fairWaiter{id: job.ID, ready: make(chan struct{})}
	if len(t.scopes[scope]) == 0 {
		t.turn = append(t.turn, scope)
	}
	t.scopes[scope] = append(t.scopes[scope], w)
	g.mu.Unlock()

	timer := time.NewTimer(time.Until(job.Deadline))
	defer timer.Stop()
	var why error
	select {
	case <-w.ready:
		g.expire(job, grace)
		return nil
	case <-ctx.Done():
		why = ctx.Err()
	case <-timer.C:
		why = fmt.Errorf("its deadline passed while %d jobs of the same tenant were ahead of it", limit)
	}
	if g.withdraw(tenant, scope, w) {
		return why
	}
	// Admitted just as it gave up: pass the place on.
	g.release(job.ID)
	return why
}

// tenant returns tenant's queue, creating it; g.mu is held.
func (g *fairGate) tenant(tenant string) *tenantQueue {
	if g.tenants == nil {
		g.tenants = map[string]*tenantQueue{}
		g.admitted = map[string]string{}
	}
	t := g.tenants[tenant]
	if t == nil {
		t = &tenantQueue{scopes: map[string][]*fairWaiter{}}
		g.tenants[tenant] = t
	}
	return t
}

// grant counts job id as admitted for tenant; g.mu is held.
func (g *fairGate) grant(tenant string, t *tenantQueue, id string) {
	t.running++
	g.admitted[id] = tenant
}

// expire releases job at its deadline plus grace, in case its caller never
// does (a call that ended early).
func (g *fairGate) expire(job *wire.Job, grace time.Duration) {
	time.AfterFunc(time.Until(job.Deadline.Add(grace)), func() { g.release(job.ID) })
}

// withdraw removes waiter w of scope; false means it was admitted already.
func (g *fairGate) withdraw(tenant, scope string, w *fairWaiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.tenants[tenant]
	if t == nil {
		return false
	}
	q := t.scopes[scope]
	for i, x := range q {
		if x == w {
			t.scopes[scope] = append(q[:i:i], q[i+1:]...)
			if len(t.scopes[scope]) == 0 {
				t.dropTurn(scope)
			}
			g.forget(tenant, t)
			return true
		}
	}
	return false
}

// release gives back the place of admitted job id and admits the tenant's
// next waiting jobs, the scopes in turn. Releasing a job twice, or one
// never admitted, does nothing.
func (g *fairGate) release(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tenant, ok := g.admitted[id]
	if !ok {
		return
	}
	delete(g.admitted, id)
	t := g.tenants[tenant]
	t.running--
	for len(t.turn) > 0 && (t.limit <= 0 || t.running < t.limit) {
		scope := t.turn[0]
		q := t.scopes[scope]
		w := q[0]
		t.scopes[scope] = q[1:]
		t.turn = t.turn[1:]
		if len(t.scopes[scope]) > 0 {
			t.turn = append(t.turn, scope) // its next job waits for its next turn
		} else {
			delete(t.scopes, scope)
		}
		g.grant(tenant, t, w.id)
		close(w.ready)
	}
	g.forget(tenant, t)
}

// dropTurn removes scope from the turns.
func (t *tenantQueue) dropTurn(scope string) {
	for i, s := range t.turn {
		if s == scope {
			t.turn = append(t.turn[:i:i], t.turn[i+1:]...)
			delete(t.scopes, scope)
			return
		}
	}
}

// forget drops tenant's queue once it holds nothing; g.mu is held.
func (g *fairGate) forget(tenant string, t *tenantQueue) {
	if t.running == 0 && len(t.turn) == 0 {
		delete(g.tenants, tenant)
	}
}

// waiting returns how many jobs of job's tenant wait for admission.
func (g *fairGate) waiting(job *wire.Job) int {
	tenant, _ := fairKeys(job)
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.tenants[tenant]
	if t == nil {
		return 0
	}
	n := 0
	for _, q := range t.scopes {
		n += len(q)
	}
	return n
}
