package frontend

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// The byte quotas of a tenant, held across every frontend and worker:
//
//   - code_file_bytes: what the tenant's code files take, over all its
//     workspaces. Each workspace's code-file writes and deletes charge the
//     tenant's counter (Keys.TenantCodeBytes) in the same atomic step as
//     the workspace's own budget (codefiles.ForTenant), so a write that
//     would take the tenant past its limit writes nothing, whichever
//     frontend serves it, however many race. Collecting a workspace
//     deletes its files through the same counter.
//   - working_dir_bytes: what the tenant's working directories take. Only
//     workers see them: after each job a worker records what the job's
//     working directory takes (worker/workdir_bytes.go) in the tenant's
//     tally (Keys.TenantWorkdirs: workspace → bytes, and their sum), and a
//     job that can write there (an execution, an upload with content) is
//     refused while the sum is at or over the limit. Jobs already running
//     are not stopped: a tenant can pass its limit by what its running
//     jobs write, each at most its workspace's disk limit.
//
// Both count whether or not a limit is set, so that setting one later
// finds the usage already counted (from when this was deployed).

// codeFilesOf is the code-file store of ctx's caller: its writes charge
// the caller's tenant's code_file_bytes.
func (f *Frontend) codeFilesOf(ctx context.Context) *codefiles.CodeStore {
	return f.files.ForTenant(tenantCodeQuota(f.cfg.Keys, f.cfg.Quotas, callerTenant(ctx)))
}

// tenantCodeQuota is the counter of tenant's code_file_bytes, with its
// limit in table (nil: none).
func tenantCodeQuota(keys statestore.Keys, table *quota.Table, tenant string) statestore.Quota {
	return statestore.Quota{Key: keys.TenantCodeBytes(wire.TenantKey(tenant)), Limit: int64(table.For(tenant, quota.CodeFileBytes))}
}

// codeBytesRefused turns a refusal by the caller's code_file_bytes into
// the quota's error; other errors pass unchanged.
func codeBytesRefused(ctx context.Context, err error) error {
	var qe *statestore.QuotaError
	if !errors.Is(err, codefiles.ErrTenantFull) || !errors.As(err, &qe) {
		return err
	}
	return quotaExceeded(quota.CodeFileBytes, callerTenant(ctx),
		fmt.Sprintf("its code files take %d bytes and this write adds %d (the limit is %d)", qe.Used, qe.Adding, qe.Limit),
		"free space with delete_code_file, in this or another of its workspaces; no tool removes a workspace: "+
			"an unused one is collected after the operator's --workspace-ttl, or at once by the operator's codexec admin gc")
}

// admitWorkdirBytes refuses job, when it can write its working directory,
// while its tenant's working directories take working_dir_bytes or more.
func (f *Frontend) admitWorkdirBytes(ctx context.Context, job *wire.Job) error {
	limit := int64(f.cfg.Quotas.For(job.Tenant, quota.WorkingDirBytes))
	if limit <= 0 || !writesWorkdir(job) {
		return nil
	}
	used, err := statestore.TallySum(ctx, f.store, f.cfg.Keys.TenantWorkdirs(wire.TenantKey(job.Tenant)))
	if err != nil {
		f.log.Warn("quota not enforced: the state store did not answer", "quota", quota.WorkingDirBytes, "tenant", job.Tenant, "err", err)
		return nil
	}
	if used < limit {
		return nil
	}
	return quotaExceeded(quota.WorkingDirBytes, job.Tenant,
		fmt.Sprintf("its working directories take %d bytes, as measured after their latest jobs (the limit is %d)", used, limit),
		"free space: empty files with upload_file (content \"\"); no tool removes a workspace: an unused one is "+
			"collected after the operator's --workspace-ttl, or at once by the operator's codexec admin gc; reading files still works")
}

// admitResultBytes refuses a job of a tenant whose jobs' results, within
// the results' retention, take its result_bytes quota or more (as the
// workers that stored them recorded: worker/resultbytes.go). Every kind of
// job stores a result.
func (f *Frontend) admitResultBytes(ctx context.Context, tenant string) error {
	limit := int64(f.cfg.Quotas.For(tenant, quota.ResultBytes))
	if limit <= 0 {
		return nil
	}
	fields, err := f.store.HGetAll(ctx, f.cfg.Keys.TenantResultBytes(wire.TenantKey(tenant)))
	if err != nil {
		f.log.Warn("quota not enforced: the state store did not answer", "quota", quota.ResultBytes, "tenant", tenant, "err", err)
		return nil
	}
	retention := f.broker.Retention()
	if retention <= 0 {
		retention = broker.DefaultRetention
	}
	used, next := statestore.ResultBytesSince(fields, time.Now().Add(-retention))
	if used < limit {
		return nil
	}
	return quotaExceeded(quota.ResultBytes, tenant,
		fmt.Sprintf("the results of its jobs in the last %s (how long results are kept) take %d bytes (the limit is %d)", shortDuration(retention), used, limit),
		retryIn(time.Until(next.Add(retention))))
}

// shortDuration writes d without its zero minutes and seconds: 24h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// writesWorkdir says whether job can add to its working directory: an
// execution, or an upload with content. Reads, and uploads of nothing
// (which empty a file), free no less than they take.
func writesWorkdir(job *wire.Job) bool {
	switch job.Kind {
	case wire.KindExecute:
		return true
	case wire.KindFiles:
		return job.File != nil && job.File.Op == wire.FileWrite && job.Code != ""
	}
	return false
}

// forgetWorkdirBytes removes scope's working directory from tenant's
// tally, when the workspace is collected.
func forgetWorkdirBytes(ctx context.Context, st statestore.Store, keys statestore.Keys, tenant, scope string) error {
	t, ok := st.(statestore.Tallier)
	if !ok {
		return nil
	}
	_, err := t.Tally(ctx, keys.TenantWorkdirs(wire.TenantKey(tenant)), scope, 0)
	return err
}

// workdirBytes is what scope's working directory took after its latest
// job, as recorded in tenant's tally (0 when nothing was recorded).
func workdirBytes(ctx context.Context, st statestore.Store, keys statestore.Keys, tenant, scope string) int64 {
	v, err := st.HGet(ctx, keys.TenantWorkdirs(wire.TenantKey(tenant)), scope)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n
}
