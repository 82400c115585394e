package frontend

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"

	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// batchRowsArgs is a submit_jobs call of rows from..to-1 of batch id.
func batchRowsArgs(id string, from, to int) map[string]any {
	rows := []any{}
	for i := from; i < to; i++ {
		rows = append(rows, map[string]any{"row": i})
	}
	return map[string]any{"batch_id": id, "code": "print(1)", "jobs": rows}
}

// announceWorker records a live worker of f's pool, so that calls are
// judged by their quotas, not refused for want of one.
func announceWorker(t *testing.T, f *Frontend) {
	t.Helper()
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: f.cfg.Pool})
	if err := f.store.Touch(t.Context(), f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func batchStatuses(br BatchResult) string {
	var s []string
	for _, j := range br.Jobs {
		s = append(s, j.Status)
	}
	return strings.Join(s, ",")
}

// A batch's jobs take places in their tenant's jobs quota like any other
// job: past it they are deferred (not queued, not failed), with when to
// submit them again, and the tenant's interactive calls are refused while
// its batch holds the places; another tenant is not touched. A place is
// given back when the job's result is stored (by the worker: here as the
// worker does it, TestAuditGivesBackBatchJobsQuotaPlace covers the
// worker's side); a row submitted again after its result takes no place.
// Until 2026-12-04 batch jobs counted in no quota.
func TestBatchJobsCountInTheJobsQuota(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "jobs=2")
	f := fx[0].f
	announceWorker(t, f)
	acme := wire.TenantKey("acme")
	if f.cfg.Keys.TenantJobs(acme) != f.cfg.Keys.Quota(quota.Jobs, acme) {
		t.Fatalf("the worker gives batch places back in %s, the quota is %s", f.cfg.Keys.TenantJobs(acme), f.cfg.Keys.Quota(quota.Jobs, acme))
	}
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	const id = "quota-batch-0123456789"
	res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs(id, 0, 4))
	if res.IsError || batchStatuses(br) != "queued,queued,deferred,deferred" {
		t.Fatalf("4 rows at jobs=2: %s", textOf(res))
	}
	for _, j := range br.Jobs[2:] {
		if j.RetryAfterMS <= 0 || !strings.Contains(j.Message, `quota jobs of tenant "acme" reached: 2 jobs queued or running at once (the limit is 2)`) {
			t.Errorf("deferred row %d: %+v, want the quota named and a retry_after_ms", j.Row, j)
		}
	}
	refusedByQuota(t, alice, quota.Jobs, "acme", "2")

	carol, err := fx[1].connect(t, fx[1].tokens["carol"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, br := callTool[BatchResult](t, carol, "submit_jobs", batchRowsArgs("other-batch-0123456789", 0, 2)); batchStatuses(br) != "queued,queued" {
		t.Fatalf("globex's batch: %s", textOf(res))
	}

	// Row 0's result is stored and its place given back, as its worker does.
	answer(t, fx[0].b, br.Jobs[0].JobID)
	if err := f.store.Leave(t.Context(), f.cfg.Keys.TenantJobs(acme), br.Jobs[0].JobID); err != nil {
		t.Fatal(err)
	}
	if res, again := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs(id, 2, 4)); batchStatuses(again) != "queued,deferred" {
		t.Fatalf("rows 2 and 3 again, one place free: %s", textOf(res))
	}
	if res, again := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs(id, 0, 1)); batchStatuses(again) != "submitted_before" {
		t.Fatalf("row 0 again, after its result: %s %+v", textOf(res), again)
	}
	waitQuotaMembers(t, f, quota.Jobs, "acme", 2)
	// With a place free, row 0 (finished) is admitted, found submitted
	// before and its place given back at once.
	answer(t, fx[0].b, br.Jobs[1].JobID)
	if err := f.store.Leave(t.Context(), f.cfg.Keys.TenantJobs(acme), br.Jobs[1].JobID); err != nil {
		t.Fatal(err)
	}
	if res, again := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs(id, 0, 1)); batchStatuses(again) != "submitted_before" {
		t.Fatalf("row 0 again, a place free: %s %+v", textOf(res), again)
	}
	waitQuotaMembers(t, f, quota.Jobs, "acme", 1)
}

// jobs_per_minute: the rows past the minute's quota are deferred until the
// window frees a place, which retry_after_ms says.
func TestBatchJobsCountInTheJobsPerMinuteQuota(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "jobs_per_minute=3")
	announceWorker(t, fx[1].f)
	alice, err := fx[1].connect(t, fx[1].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs("minute-batch-0123456789", 0, 5))
	if batchStatuses(br) != "queued,queued,queued,deferred,deferred" {
		t.Fatalf("5 rows at jobs_per_minute=3: %s", textOf(res))
	}
	d := br.Jobs[3]
	if d.RetryAfterMS <= 0 || d.RetryAfterMS > 60_000 || !strings.Contains(d.Message, fmt.Sprintf(`quota %s of tenant "acme" reached: 3 jobs in the last minute`, quota.JobsPerMinute)) {
		t.Errorf("deferred: %+v", d)
	}
	refusedByQuota(t, alice, quota.JobsPerMinute, "acme", "3")
}

// A batch's working directory is a workspace of its tenant: the call that
// submits to it records its owner, so `admin usage` lists it and the
// collector removes it (from the workers too); what its jobs write counts
// in the tenant's working_dir_bytes, and once past that quota a
// submit_jobs call is deferred whole, whichever batch it names. Until
// 2026-12-04 a batch's directory was none of these: each new batch id was
// a directory and a file system image that no quota counted and nothing
// removed, so a tenant under any quota filled the workers' disks one batch
// at a time.
func TestBatchDirectoryIsATenantsWorkspace(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "working_dir_bytes=1000")
	f := fx[0].f
	ctx, st, keys := t.Context(), f.store, f.cfg.Keys
	announceWorker(t, f)
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs("disk-batch-0123456789", 0, 1))
	if batchStatuses(br) != "queued" {
		t.Fatalf("a batch under the quota: %s", textOf(res))
	}
	use, err := Usage(ctx, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	var batch string
	for _, u := range use {
		if strings.HasPrefix(u.Scope, "b-") && u.Tenant == "acme" {
			batch = u.Scope
		}
	}
	if batch == "" {
		t.Fatalf("the batch's directory is no workspace of acme's: usage %+v", use)
	}
	// What a worker records after the batch's job wrote 5,000 bytes.
	if _, err := st.(statestore.Tallier).Tally(ctx, keys.TenantWorkdirs(wire.TenantKey("acme")), batch, 5000); err != nil {
		t.Fatal(err)
	}
	res, br = callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs("fresh-batch-0123456789", 0, 2))
	if batchStatuses(br) != "deferred,deferred" {
		t.Fatalf("a new batch past working_dir_bytes: %s", textOf(res))
	}
	if d := br.Jobs[0]; d.RetryAfterMS <= 0 || !strings.Contains(d.Message, `quota working_dir_bytes of tenant "acme" reached`) {
		t.Errorf("deferred: %+v", d)
	}
	if gone, err := Collect(ctx, st, keys, time.Now().Add(time.Hour), false); err != nil || !slices.ContainsFunc(gone, func(u WorkspaceUsage) bool { return u.Scope == batch }) {
		t.Fatalf("collected %+v, %v; want the batch's directory", gone, err)
	}
	if res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs("fresh-batch-0123456789", 0, 1)); batchStatuses(br) != "queued" {
		t.Fatalf("after the collection: %s", textOf(res))
	}
}

// A batch that calls keep submitting to is not collected as unused: each
// frontend renews its owner record's time (at most hourly) as calls submit
// to it, since a batch records no runs. Before, its age counted from its
// first call, and a batch submitting for longer than the workspace ttl was
// collected while it ran.
func TestBatchInUseIsNotCollected(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "")
	f := fx[0].f
	announceWorker(t, f)
	ctx, st, keys := t.Context(), f.store, f.cfg.Keys
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	const id = "long-batch-0123456789"
	if res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs(id, 0, 1)); batchStatuses(br) != "queued" {
		t.Fatalf("submit: %s", textOf(res))
	}
	use, err := Usage(ctx, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	var batch string
	for _, u := range use {
		if strings.HasPrefix(u.Scope, "b-") {
			batch = u.Scope
		}
	}
	if batch == "" {
		t.Fatalf("no batch among %+v", use)
	}
	// The batch started 40 days ago, as its record says.
	old, _ := json.Marshal(ScopeOwner{Tenant: "acme", Principal: "alice", Seen: time.Now().Add(-40 * 24 * time.Hour).UTC()})
	if err := st.Set(ctx, keys.ScopeOwner(batch), old, 0); err != nil {
		t.Fatal(err)
	}
	// A call now, through the other frontend, which has not renewed it.
	alice2, err := fx[1].connect(t, fx[1].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, br := callTool[BatchResult](t, alice2, "submit_jobs", batchRowsArgs(id, 1, 2)); batchStatuses(br) != "queued" {
		t.Fatalf("submit again: %s", textOf(res))
	}
	gone, err := Collect(ctx, st, keys, time.Now().Add(-30*24*time.Hour), true)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range gone {
		if u.Scope == batch {
			t.Fatalf("a batch submitted to a moment ago would be collected: %+v", u)
		}
	}
}

// The environment a submit_jobs call names takes a place in its tenant's
// builds_per_hour, one per environment: calls and batches naming the same
// one are queued, a call naming another past the quota is deferred whole,
// and a call naming none is not touched. Until 2026-12-04 a batch's
// environment counted in no quota, and each call names its own, so a
// tenant at its builds_per_hour had the workers build one environment per
// call.
func TestBatchEnvironmentCountsInBuildsPerHour(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "builds_per_hour=1")
	announceWorker(t, fx[0].f)
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	withEnv := func(id string, from, to int, pkgs ...any) map[string]any {
		a := batchRowsArgs(id, from, to)
		a["packages"] = pkgs
		return a
	}
	if res, br := callTool[BatchResult](t, alice, "submit_jobs", withEnv("build-batch-000000001", 0, 2, "six")); batchStatuses(br) != "queued,queued" {
		t.Fatalf("the first environment: %s", textOf(res))
	}
	if res, br := callTool[BatchResult](t, alice, "submit_jobs", withEnv("build-batch-000000002", 0, 1, "six")); batchStatuses(br) != "queued" {
		t.Fatalf("the same environment in another batch: %s", textOf(res))
	}
	res, br := callTool[BatchResult](t, alice, "submit_jobs", withEnv("build-batch-000000001", 2, 4, "iniconfig"))
	if batchStatuses(br) != "deferred,deferred" {
		t.Fatalf("another environment at builds_per_hour=1: %s", textOf(res))
	}
	if d := br.Jobs[0]; d.RetryAfterMS <= 0 || !strings.Contains(d.Message, `quota builds_per_hour of tenant "acme" reached: 1 environment builds in the last hour`) {
		t.Errorf("deferred: %+v", d)
	}
	if res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs("build-batch-000000003", 0, 1)); batchStatuses(br) != "queued" {
		t.Fatalf("a call in the default environment: %s", textOf(res))
	}
}
