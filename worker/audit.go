package worker

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/codexec/codexec/wire"
)

// stampAudit copies into res what the audit needs of job: who sent it and
// the digest of its code.
func stampAudit(job *wire.Job, res *wire.Result) {
	res.Tenant, res.Principal, res.CodeSHA256 = job.Tenant, job.Principal, wire.CodeDigest(job.Code)
}

// audit writes the job's audit record as one log line and appends it to
// its tenant's log of the day in the state store (read by `codexec admin
// audit`). A record the store refuses is logged, not retried: the log
// line has it.
func (w *Worker) audit(ctx context.Context, job *wire.Job, res *wire.Result, log *slog.Logger) {
	rec := wire.NewAuditRecord(job, res)
	log.Info("job audit", "tenant", rec.Tenant, "principal", rec.Principal, "workspace", rec.Workspace,
		"kind", rec.Kind, "code_sha256", rec.CodeSHA256, "env", rec.EnvID, "status", rec.Status,
		"duration_ms", rec.DurationMS)
	line, _ := json.Marshal(rec)
	ctx = context.WithoutCancel(ctx)
	tenant := wire.TenantKey(rec.Tenant)
	if _, known := w.auditTenants.Load(tenant); !known {
		if err := w.store.HSet(ctx, w.cfg.Keys.AuditTenants(), tenant, []byte(rec.Tenant)); err != nil {
			log.Warn("audit: tenant not recorded in the state store", "err", err)
			return
		}
		w.auditTenants.Store(tenant, true)
	}
	if _, err := w.store.Append(ctx, w.cfg.Keys.Audit(tenant, wire.AuditDay(rec.Time)), append(line, '\n'), 0); err != nil {
		log.Warn("audit: record not stored in the state store", "err", err)
	}
}
