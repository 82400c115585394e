package frontend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/wire"
)

// Batch jobs and the tenant quotas. A batch's jobs are jobs of the
// caller's tenant like any other: each takes a place in jobs_per_minute
// (for a minute) and in jobs (until its result is stored: the worker that
// stores it gives the place back, since no call waits for a batch job, and
// the member's ttl, the job's latest possible end, frees it otherwise).
// Until 2026-12-04 they counted in neither, so a tenant at its quotas ran
// as much code as it liked through submit_jobs.
//
// A job over a quota is not refused: it is deferred, answered with how
// long until the quota may admit it, and the batch client submits it again
// then. The rows after it in the same call are deferred too, without
// asking the store, so that a batch keeps its order; a job submitted before
// is never deferred (it is answered submitted_before, as without quotas).
// The environment a call names (python_version, packages) takes a place in
// builds_per_hour, one per environment whatever the number of calls and
// batches naming it (admitBatchBuild).
//
// A batch's working directory is a workspace of its tenant like a
// session's: its owner is recorded when a call submits to it (so `admin
// usage` lists it and the collector removes it, from the workers too, once
// unused for the workspace ttl), each of its jobs reports what it takes in
// the tenant's working_dir_bytes, and a call while the tenant is past that
// quota is deferred whole. Until 2026-12-04 a batch's directory was none of
// these: each new batch id was a directory (and a file system image) of
// its own that no quota counted and nothing ever removed, so a tenant
// under any quota filled the workers' disks one batch at a time.

// batchDeferred is the status of a batch job a quota deferred.
const batchDeferred = "deferred"

// batchDeferral says why and for how long a batch job was deferred.
type batchDeferral struct {
	message string
	retry   time.Duration
}

// batchSlotRetry bounds the wait a deferral by the jobs quota suggests: a
// place frees when any of the tenant's jobs ends, usually long before the
// earliest member's ttl.
const batchSlotRetry = 2 * time.Second

// admitBatchJob takes job's places in its tenant's jobs_per_minute and
// jobs quotas, or, over either, takes none and says why.
func (f *Frontend) admitBatchJob(ctx context.Context, job *wire.Job) (quotaPlaces, *batchDeferral) {
	p, refused := f.takeJobPlaces(ctx, job.Tenant, job.ID, false, time.Until(jobSettledBy(job)))
	if refused == nil {
		return p, nil
	}
	d := &batchDeferral{retry: max(refused.retry, time.Millisecond)}
	when := "in " + d.retry.Round(100*time.Millisecond).String()
	if refused.name == quota.Jobs {
		d.retry, when = min(max(refused.retry, 250*time.Millisecond), batchSlotRetry), "when one of them finishes"
	}
	d.message = fmt.Sprintf("not queued: quota %s of %s reached: %s; submit it again %s", refused.name, quotaTenant(job.Tenant), refused.what(), when)
	return quotaPlaces{}, d
}

// batchJobRecorded says whether job id was submitted before (it has a
// record). A record the broker cannot read counts as none: the job is then
// deferred, and submitted again later.
func (f *Frontend) batchJobRecorded(ctx context.Context, id string) bool {
	_, err := f.broker.GetJobRecord(ctx, id)
	return err == nil
}

// batchResubmitted handles a job submitted before, whose places admitBatchJob
// has just taken again: when the job has its result already, its worker
// gave its place in jobs back, and it would otherwise be held until the
// member's ttl.
func (f *Frontend) batchResubmitted(ctx context.Context, job *wire.Job, p quotaPlaces) {
	if p.jobs == "" {
		return
	}
	if _, err := f.broker.GetResult(ctx, job.ID); err == nil || !errors.Is(err, wire.ErrResultNotFound) {
		_ = f.store.Leave(context.WithoutCancel(ctx), p.jobs, job.ID)
	}
}

// batchWorkdirRetry is when a call deferred by working_dir_bytes suggests
// trying again: room is made by deletes or a collection, not by time.
const batchWorkdirRetry = time.Minute

// admitBatchBytes defers a submit_jobs call of a tenant whose working
// directories, its batches' included, take its working_dir_bytes quota or
// more, or whose jobs' results take its result_bytes; nil when neither.
func (f *Frontend) admitBatchBytes(ctx context.Context) *batchDeferral {
	err := f.admitWorkdirBytes(ctx, &wire.Job{Kind: wire.KindExecute, Tenant: callerTenant(ctx)})
	if err == nil {
		err = f.admitResultBytes(ctx, callerTenant(ctx))
	}
	if err == nil {
		return nil
	}
	return &batchDeferral{retry: batchWorkdirRetry, message: "not queued: " + asToolError(err).Message}
}

// admitBatchBuild takes a place in the caller's tenant's builds_per_hour for
// env, the environment of a submit_jobs call (none: nil), or defers the call.
// The member is the environment's id: every call and batch of the tenant
// naming it holds the one place (renewed by each call), as the workers
// build it once. Until 2026-12-04 a batch's environment counted in no
// quota, and since each call names its own, a tenant at its builds_per_hour
// had the workers build one environment per call, the rows of each call
// waiting for it.
func (f *Frontend) admitBatchBuild(ctx context.Context, env *envspec.Spec) *batchDeferral {
	if env == nil || f.cfg.Quotas == nil {
		return nil
	}
	tenant := callerTenant(ctx)
	_, limit, adm, _ := f.admitQuota(ctx, quota.BuildsPerHour, tenant, "batch-"+env.ID(), time.Hour)
	if adm.Admitted {
		return nil
	}
	refused := quotaRefusal{name: quota.BuildsPerHour, count: adm.Count, limit: limit, retry: adm.Retry}
	d := &batchDeferral{retry: max(adm.Retry, time.Millisecond)}
	d.message = fmt.Sprintf("not queued: quota %s of %s reached: %s; submit it again in %s", refused.name, quotaTenant(tenant), refused.what(), d.retry.Round(100*time.Millisecond))
	return d
}
