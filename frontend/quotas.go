package frontend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
)

// Quotas per tenant (Config.Quotas), held across every frontend: each is a
// set in the state store (statestore.Admitter) whose members are the
// tenant's jobs or workspaces, each living a ttl, and a member is added
// only while the set has fewer than the limit, in one atomic step.
//
//   - jobs: a job is a member from its dispatch until its result comes
//     (or, when its call ended first, until its result comes or it cannot
//     run any more); a frontend that dies holding it frees it when the
//     job's latest possible end passes.
//   - jobs_per_minute, builds_per_hour: each job (each build) a member for
//     a minute (an hour): a sliding window.
//   - workspaces: each workspace given a handle is a member for
//     Config.WorkspaceTTL, renewed when the handle is used.
//
// A quota is checked before anything of the call is done: refused, the
// call does nothing and says which quota, its value, and when to try
// again. A limit of 0 costs nothing (no store call). When the store does
// not answer, quotas are not enforced (the call goes on, and the frontend
// logs it): the store being down must not stop every tenant's work.

// quotaSlots remembers which jobs hold a slot of the jobs quota, so that
// only those pay for leaving it.
type quotaSlots struct {
	mu   sync.Mutex
	jobs map[string]string // job id → the set it is a member of
}

func (q *quotaSlots) add(id, set string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.jobs == nil {
		q.jobs = map[string]string{}
	}
	q.jobs[id] = set
}

func (q *quotaSlots) take(id string) (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	set, ok := q.jobs[id]
	delete(q.jobs, id)
	return set, ok
}

// quotaTenant names a tenant in a quota error.
func quotaTenant(tenant string) string {
	if tenant == "" {
		return "the callers without credentials"
	}
	return "tenant " + strconv.Quote(tenant)
}

// quotaExceeded is the error of a refused quota.
func quotaExceeded(name, tenant, what, retry string) *toolError {
	return rejected("quota %s of %s reached: %s; nothing was done; %s", name, quotaTenant(tenant), what, retry)
}

// retryIn says when to try again, rounded up to the second.
func retryIn(d time.Duration) string {
	return fmt.Sprintf("try again in %s", max(d, 0).Truncate(time.Second)+time.Second)
}

// admitQuota adds member to the quota set name of tenant for ttl, when its
// limit allows. It returns the set's key ("" when the quota has no limit)
// and, refused, the limit and the admission.
func (f *Frontend) admitQuota(ctx context.Context, name, tenant, member string, ttl time.Duration) (string, int, statestore.Admission, error) {
	limit := f.cfg.Quotas.For(tenant, name)
	a, ok := f.store.(statestore.Admitter)
	if limit <= 0 || !ok {
		return "", 0, statestore.Admission{Admitted: true}, nil
	}
	set := f.cfg.Keys.Quota(name, wire.TenantKey(tenant))
	adm, err := a.Admit(ctx, set, member, nil, limit, ttl)
	if err != nil {
		f.log.Warn("quota not enforced: the state store did not answer", "quota", name, "tenant", tenant, "err", err)
		return "", 0, statestore.Admission{Admitted: true}, nil
	}
	return set, limit, adm, nil
}

// quotaRefusal is a quota that refused a job's place: which, its live
// count and limit, and when its earliest member leaves.
type quotaRefusal struct {
	name         string
	count, limit int
	retry        time.Duration
}

// what says what the refused quota counts, as a refusal states it.
func (r *quotaRefusal) what() string {
	switch r.name {
	case quota.JobsPerMinute:
		return fmt.Sprintf("%d jobs in the last minute (the limit is %d)", r.count, r.limit)
	case quota.BuildsPerHour:
		return fmt.Sprintf("%d environment builds in the last hour (the limit is %d)", r.count, r.limit)
	default:
		return fmt.Sprintf("%d jobs queued or running at once (the limit is %d)", r.count, r.limit)
	}
}

// exceeded is the refusal as a call's error.
func (r *quotaRefusal) exceeded(tenant string) *toolError {
	retry := retryIn(r.retry)
	if r.name == quota.Jobs {
		retry = "try again when one of them finishes (at the latest in " + (max(r.retry, 0).Truncate(time.Second) + time.Second).String() + ")"
	}
	return quotaExceeded(r.name, tenant, r.what(), retry)
}

// quotaPlaces are the quota sets a job took a place in ("" for none).
type quotaPlaces struct{ minute, builds, jobs string }

// leave gives back the places of member.
func (p quotaPlaces) leave(ctx context.Context, f *Frontend, member string) {
	for _, set := range []string{p.minute, p.builds, p.jobs} {
		if set != "" {
			_ = f.store.Leave(context.WithoutCancel(ctx), set, member)
		}
	}
}

// takeJobPlaces takes member's places in tenant's quotas of jobs: a minute
// in jobs_per_minute, an hour in builds_per_hour for a build, jobsTTL in
// jobs. Refused by one, it gives back those taken and says which.
func (f *Frontend) takeJobPlaces(ctx context.Context, tenant, member string, build bool, jobsTTL time.Duration) (quotaPlaces, *quotaRefusal) {
	var p quotaPlaces
	if f.cfg.Quotas == nil {
		return p, nil
	}
	steps := []struct {
		name string
		ttl  time.Duration
		set  *string
	}{{quota.JobsPerMinute, time.Minute, &p.minute}, {quota.BuildsPerHour, time.Hour, &p.builds}, {quota.Jobs, jobsTTL, &p.jobs}}
	for _, st := range steps {
		if st.name == quota.BuildsPerHour && !build {
			continue
		}
		set, limit, adm, _ := f.admitQuota(ctx, st.name, tenant, member, st.ttl)
		if !adm.Admitted {
			p.leave(ctx, f, member)
			return quotaPlaces{}, &quotaRefusal{name: st.name, count: adm.Count, limit: limit, retry: adm.Retry}
		}
		*st.set = set
	}
	return p, nil
}

// admitJob checks job against its tenant's quotas (working_dir_bytes,
// result_bytes, then jobs_per_minute, builds_per_hour for a build, jobs)
// and takes its places; refused, it gives back those taken and returns the
// error naming the quota.
func (f *Frontend) admitJob(ctx context.Context, job *wire.Job) (err error) {
	f.awaiting.add(job)
	defer func() {
		if err != nil {
			f.awaiting.remove(job.ID)
		}
	}()
	if f.cfg.Quotas == nil {
		return nil
	}
	if err := f.admitWorkdirBytes(ctx, job); err != nil {
		return err
	}
	if err := f.admitResultBytes(ctx, job.Tenant); err != nil {
		return err
	}
	p, refused := f.takeJobPlaces(ctx, job.Tenant, job.ID, job.Kind == wire.KindInstall, time.Until(jobSettledBy(job)))
	if refused != nil {
		return refused.exceeded(job.Tenant)
	}
	if p.jobs != "" {
		f.slots.add(job.ID, p.jobs)
	}
	return nil
}

// admitContextCall checks a call in a context (run_in_context) against its
// tenant's quotas of jobs, as a job: its code runs as a job's does, in a
// job's process kept alive, so it counts in jobs_per_minute and, until it
// has answered, in jobs. Until 2026-12-04 a call in a context was counted
// in neither, so a tenant at its quota of jobs ran code all the same, in
// as many contexts as its sessions could make. release gives back the
// place in jobs; the member's ttl (the call's longest wait) frees it when
// the frontend dies first.
func (f *Frontend) admitContextCall(ctx context.Context, timeout time.Duration) (release func(), err error) {
	release = func() {}
	if f.cfg.Quotas == nil {
		return release, nil
	}
	tenant := callerTenant(ctx)
	member := "ctx-" + ulid.Make().String()
	p, refused := f.takeJobPlaces(ctx, tenant, member, false, timeout+contextAnswerSlack+settleGrace)
	if refused != nil {
		return nil, refused.exceeded(tenant)
	}
	if p.jobs == "" {
		return release, nil
	}
	return func() { _ = f.store.Leave(context.WithoutCancel(ctx), p.jobs, member) }, nil
}

// jobSettledBy is when job cannot be running any more (settledBy of its
// record).
func jobSettledBy(job *wire.Job) time.Time {
	return job.Deadline.Add(time.Duration(job.TimeoutMS)*time.Millisecond + settleGrace)
}

// releaseJob gives back job's place in the jobs quota, if it holds one:
// at once when its result came or it can no longer come (done), else once
// the result comes or the job cannot run any more, in the background.
func (f *Frontend) releaseJob(job *wire.Job, done bool) {
	f.awaiting.remove(job.ID)
	set, ok := f.slots.take(job.ID)
	if !ok {
		return
	}
	if done {
		_ = f.store.Leave(f.hard, set, job.ID)
		return
	}
	go func() {
		ctx, cancel := context.WithDeadline(f.hard, jobSettledBy(job))
		defer cancel()
		_, _ = f.broker.WaitResult(ctx, job.ID)
		// Stopped with the frontend, the member's ttl frees the place.
		if f.hard.Err() == nil {
			_ = f.store.Leave(f.hard, set, job.ID)
		}
	}()
}

// admitWorkspace takes a place of the workspaces quota for scope, a new
// workspace of the caller's tenant.
func (f *Frontend) admitWorkspace(ctx context.Context, scope string) error {
	tenant := callerTenant(ctx)
	_, limit, adm, _ := f.admitQuota(ctx, quota.Workspaces, tenant, scope, f.cfg.WorkspaceTTL)
	if !adm.Admitted {
		return quotaExceeded(quota.Workspaces, tenant, fmt.Sprintf("%d workspaces (the limit is %d)", adm.Count, limit),
			"a workspace unused for "+f.cfg.WorkspaceTTL.String()+" expires; "+retryIn(adm.Retry))
	}
	return nil
}

// touchWorkspace renews scope's place in the workspaces quota on use.
func (f *Frontend) touchWorkspace(ctx context.Context, scope string) {
	tenant := callerTenant(ctx)
	if f.cfg.Quotas.For(tenant, quota.Workspaces) <= 0 {
		return
	}
	if err := f.store.Touch(ctx, f.cfg.Keys.Quota(quota.Workspaces, wire.TenantKey(tenant)), scope, nil, f.cfg.WorkspaceTTL); err != nil && !errors.Is(err, context.Canceled) {
		f.log.Warn("workspace quota not renewed", "err", err)
	}
}

// callerTenant is the tenant of the call's credentials ("" without).
func callerTenant(ctx context.Context) string {
	id, _ := auth.FromContext(ctx)
	return id.Tenant
}
