package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// Revocations. An operator revokes a tenant, or one principal of it, with
// `codexec admin revoke`, which writes Keys.Revoked in the state store
// (frontend/revoke.go). Frontends refuse the identity's requests, and
// cancel the jobs their own calls wait for; a job nobody waits for (a
// batch row, a call whose client or frontend went away, a job still
// queued) is the workers' to stop. Every worker reads the revocations at
// Start, before it takes a job, then every revokedPoll, as it reads the
// collections' notices (collect.go):
//
//   - a job taken from the queue whose Tenant/Principal is revoked does not
//     run: its result says so, and the delivery is acked;
//   - a job of a revoked identity that runs here is stopped as a cancelled
//     one is (cancel.go): its context ends with errJobRevoked as its cause,
//     which kills its process group, sandbox and cgroup; its result says
//     why, with what it wrote until then.
//
// A revocation lifted (--undo) lets the identity's next jobs run. When the
// store does not answer, the last revocations read stand.

// revokedPoll is how often a worker reads the revocations again.
var revokedPoll = time.Second

// errJobRevoked is the cause of a job context ended by a revocation.
var errJobRevoked = errors.New("worker: the credentials of the job's tenant or principal were revoked by the operator")

// revocationWatch is a worker's copy of the revocations, and the jobs it
// runs that one may stop.
type revocationWatch struct {
	mu      sync.Mutex
	revoked statestore.Revocations
	running map[*revocable]struct{}
	failing bool // the last read failed (logged once)

	stop, done chan struct{}
}

// revocable is a job that runs, with whose it is.
type revocable struct {
	tenant, principal string
	stop              context.CancelCauseFunc
}

// startRevocations reads the revocations, then reads them again every
// revokedPoll until stopRevocations.
func (w *Worker) startRevocations(ctx context.Context) {
	rw := &w.revocations
	w.readRevocations(ctx)
	stop, done := make(chan struct{}), make(chan struct{})
	rw.mu.Lock()
	rw.stop, rw.done = stop, done
	rw.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(revokedPoll)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				w.readRevocations(context.Background())
			}
		}
	}()
}

// stopRevocations stops the poll; idempotent.
func (w *Worker) stopRevocations() {
	rw := &w.revocations
	rw.mu.Lock()
	stop, done := rw.stop, rw.done
	rw.stop = nil
	rw.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// readRevocations reads the revocations and stops what runs here of a
// revoked identity.
func (w *Worker) readRevocations(ctx context.Context) {
	rw := &w.revocations
	rctx, cancel := context.WithTimeout(ctx, 5*revokedPoll)
	all, err := w.store.HGetAll(rctx, w.cfg.Keys.Revoked())
	cancel()
	rw.mu.Lock()
	if err != nil {
		if !rw.failing {
			w.log.Warn("revocations unreadable; the last ones read stand", "err", err)
		}
		rw.failing = true
		rw.mu.Unlock()
		return
	}
	m := statestore.Revocations(all)
	rw.failing, rw.revoked = false, m
	var doomed []*revocable
	for r := range rw.running {
		if _, ok := m.Match(r.tenant, r.principal); ok {
			doomed = append(doomed, r)
		}
	}
	rw.mu.Unlock()
	for _, r := range doomed {
		r.stop(errJobRevoked)
	}
	w.endRevokedContexts(m)
}

// watchRevoked returns a context of ctx that ends with errJobRevoked when
// job's tenant or principal is revoked, and the function that stops
// watching. revoked says since when the identity is revoked already: the
// job must not run.
func (w *Worker) watchRevoked(ctx context.Context, job *wire.Job) (jctx context.Context, stop func(), revokedAt string, revoked bool) {
	rw := &w.revocations
	jctx, cancel := context.WithCancelCause(ctx)
	r := &revocable{tenant: job.Tenant, principal: job.Principal, stop: cancel}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	if revokedAt, revoked = rw.revoked.Match(job.Tenant, job.Principal); revoked {
		return jctx, func() { cancel(nil) }, revokedAt, true
	}
	if rw.running == nil {
		rw.running = map[*revocable]struct{}{}
	}
	rw.running[r] = struct{}{}
	return jctx, func() {
		rw.mu.Lock()
		delete(rw.running, r)
		rw.mu.Unlock()
		cancel(nil)
	}, "", false
}

// jobRevoked says jctx, from watchRevoked, ended because the job's
// identity was revoked.
func jobRevoked(jctx context.Context) bool {
	return errors.Is(context.Cause(jctx), errJobRevoked)
}

// revokedNow says whether job's identity is revoked, and since when, for a
// job that was cancelled: a frontend cancels the jobs its calls wait for of
// a revoked identity as soon as it reads the revocation, which may be before
// this worker's own read, so a revocation the last read did not hold is
// looked for in the store. Its result then says why, rather than that its
// caller cancelled it.
func (w *Worker) revokedNow(ctx context.Context, job *wire.Job) (string, bool) {
	if job.Tenant == "" {
		return "", false
	}
	rw := &w.revocations
	rw.mu.Lock()
	at, ok := rw.revoked.Match(job.Tenant, job.Principal)
	rw.mu.Unlock()
	if ok {
		return at, true
	}
	rctx, cancel := context.WithTimeout(ctx, revokedPoll)
	defer cancel()
	all, err := w.store.HGetAll(rctx, w.cfg.Keys.Revoked())
	if err != nil {
		return "", false
	}
	return statestore.Revocations(all).Match(job.Tenant, job.Principal)
}

// revokedMessage says whose credentials were revoked.
func revokedMessage(tenant, principal string) string {
	return fmt.Sprintf("the credentials of tenant %q, principal %q were revoked by the operator", tenant, principal)
}

// revokedResult is the result of a job whose identity was revoked before
// it started.
func (w *Worker) revokedResult(job *wire.Job, attempt int, at string) *wire.Result {
	return w.result(job, attempt, wire.StatusRejected, revokedMessage(job.Tenant, job.Principal)+" ("+at+"): the job did not run")
}

// markRevoked turns the result of a run stopped by a revocation into a
// cancelled result that says why, keeping what the job wrote until then.
// A run that ended on its own as the revocation came keeps its result.
func markRevoked(res *wire.Result, job *wire.Job) {
	if res.Status == wire.StatusOK || (res.Status == wire.StatusError && res.Signal == "") {
		return
	}
	res.Status, res.Limit = wire.StatusCancelled, ""
	res.Message = revokedMessage(job.Tenant, job.Principal) + ": the job and every process it started were stopped"
}

// endRevokedContexts ends this worker's contexts (contexts.go) of a
// revoked identity, as their interpreters end: a call running in one is
// stopped, and its reply says why (contextHost.run); an idle one is ended
// here, and its next call is told why. One that a call has just taken is
// left to the next read.
func (w *Worker) endRevokedContexts(m statestore.Revocations) {
	h := w.contexts
	if h == nil || len(m) == 0 {
		return
	}
	h.mu.Lock()
	var idle []*liveContext
	for _, c := range h.live {
		if _, ok := m.Match(c.req.Tenant, c.req.Principal); !ok {
			continue
		}
		if c.stopCall != nil {
			c.stopCall(errJobRevoked)
			continue
		}
		idle = append(idle, c)
	}
	h.mu.Unlock()
	for _, c := range idle {
		if !c.mu.TryLock() {
			continue
		}
		h.mu.Lock()
		still := h.live[contextKey(c.scope, c.id)] == c
		h.mu.Unlock()
		if still {
			w.log.Info("context of a revoked identity; ending it", "context", c.id, "scope", c.scope)
			h.endOnItsOwn(c, revokedMessage(c.req.Tenant, c.req.Principal))
		}
		c.mu.Unlock()
	}
}
