package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// What working directories take, for the working_dir_bytes quota of their
// tenants (frontend/quotas_bytes.go): after each job that may have changed
// its working directory, the worker records what the directory takes now
// in its tenant's tally (Keys.TenantWorkdirs: scope → bytes, and their sum
// kept by the store in the same step). Frontends refuse a tenant's next
// writing job while the sum is at or over the limit; a collected workspace
// leaves the tally.
//
// A report that would say what the worker said last about the same
// directory, less than workdirRefresh ago, is not sent: most jobs change
// nothing worth a store call. A directory without a file system of its
// own is measured by walking it, which is on the job's path: like the disk
// watch (watchDisk), such walks take at most a tenth of the time, so a
// large tree is measured again only after ten times its last walk.

// workdirRefresh is how long an unchanged figure goes unreported.
const workdirRefresh = time.Minute

// maxWorkdirReports bounds the directories a worker remembers reporting;
// past it, it forgets them all and reports each again.
const maxWorkdirReports = 100_000

// workdirReport is what the worker last reported for one directory.
type workdirReport struct {
	tenant string
	bytes  int64
	at     time.Time
}

// workdirReports are the worker's latest reports, by scope.
type workdirReports struct {
	mu    sync.Mutex
	last  map[string]workdirReport
	walks map[string]time.Time // by scope: when a measured directory may be walked again
}

// walkDue says whether scope's measured directory may be walked at now.
func (w *workdirReports) walkDue(scope string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !now.Before(w.walks[scope])
}

// walked records a walk of scope's directory that started at and took
// took: the next may come ten times took later.
func (w *workdirReports) walked(scope string, at time.Time, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.walks == nil || len(w.walks) >= maxWorkdirReports {
		w.walks = map[string]time.Time{}
	}
	w.walks[scope] = at.Add(10 * took)
}

// due says whether r differs from what was last reported for scope, or
// was reported long enough ago; it records r when it does.
func (w *workdirReports) due(scope string, r workdirReport) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.last[scope]; ok && old.tenant == r.tenant && old.bytes == r.bytes && r.at.Sub(old.at) < workdirRefresh {
		return false
	}
	if w.last == nil || len(w.last) >= maxWorkdirReports {
		w.last = map[string]workdirReport{}
	}
	w.last[scope] = r
	return true
}

// forget drops scope's record, so that the next report is sent.
func (w *workdirReports) forget(scope string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.last, scope)
}

// reportJobWorkdir reports job's working directory (reportWorkdir), a
// batch's as a session's: a batch's directory is a workspace of its tenant
// (the frontend records it, and the collector removes it). Until
// 2026-12-04 a batch's was not reported, so each new batch id was a
// directory of up to a job's disk limit that no quota counted.
func (w *Worker) reportJobWorkdir(ctx context.Context, job *wire.Job, disk *sessionDisk, cwd string, log *slog.Logger) {
	w.reportWorkdir(ctx, job.Scope, job.Tenant, disk, cwd, log)
}

// reportWorkdir records what the working directory cwd of scope (on
// disk, nil when measured) takes now in the tally of tenant, after a job
// or a context's call. Best effort: a failure is logged, and the next job
// of the session reports again.
func (w *Worker) reportWorkdir(ctx context.Context, scope, tenant string, disk *sessionDisk, cwd string, log *slog.Logger) {
	t, ok := w.store.(statestore.Tallier)
	if !ok {
		return
	}
	now := time.Now()
	if disk == nil && !w.workdirs.walkDue(scope, now) {
		return
	}
	// What the files take on disk, or in the snapshot this worker stored
	// of them when that is more (sparse files: a tar holds their holes).
	r := workdirReport{tenant: tenant, bytes: max(disk.usage(cwd), w.loadLocalWorkspace(scope).Stored), at: now}
	if disk == nil {
		w.workdirs.walked(scope, now, time.Since(now))
	}
	if !w.workdirs.due(scope, r) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := t.Tally(ctx, w.cfg.Keys.TenantWorkdirs(wire.TenantKey(tenant)), scope, r.bytes); err != nil {
		w.workdirs.forget(scope)
		log.Warn("record what the working directory takes", "err", err)
	}
}
