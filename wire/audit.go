package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// AuditRecord is one job in the audit log: who ran what, where, and how it
// ended. The worker that stores a job's result writes one as a log line
// ("job audit") and appends it to the tenant's log of the day in the state
// store; `codexec admin audit` exports a tenant's as JSON Lines.
type AuditRecord struct {
	Time       time.Time `json:"time"`
	Tenant     string    `json:"tenant"`
	Principal  string    `json:"principal,omitempty"`
	Workspace  string    `json:"workspace"`
	JobID      string    `json:"job_id"`
	Kind       JobKind   `json:"kind"`
	CodeSHA256 string    `json:"code_sha256,omitempty"`
	EnvID      string    `json:"env_id,omitempty"`
	Status     Status    `json:"status"`
	DurationMS float64   `json:"duration_ms"`
	WorkerID   string    `json:"worker_id"`
	Attempt    int       `json:"attempt"`
}

// NewAuditRecord is the audit record of res, the result of job.
func NewAuditRecord(job *Job, res *Result) AuditRecord {
	at := res.FinishedAt
	if at.IsZero() {
		at = time.Now().UTC()
	}
	return AuditRecord{
		Time: at, Tenant: job.Tenant, Principal: job.Principal, Workspace: job.Scope, JobID: job.ID,
		Kind: job.Kind, CodeSHA256: res.CodeSHA256, EnvID: res.EnvID, Status: res.Status, DurationMS: res.DurationMS,
		WorkerID: res.WorkerID, Attempt: res.Attempt,
	}
}

// CodeDigest is the hex SHA-256 of code ("" for none).
func CodeDigest(code string) string {
	if code == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(code))
	return hex.EncodeToString(sum[:])
}

// TenantKey is the hex digest that names tenant in state-store keys
// (quotas, audit), so that a tenant's name is never part of a key.
func TenantKey(tenant string) string {
	sum := sha256.Sum256([]byte("tenant\x00" + tenant))
	return hex.EncodeToString(sum[:16])
}

// AuditDay is the day under which a record of time t is kept: YYYYMMDD, UTC.
func AuditDay(t time.Time) string { return t.UTC().Format("20060102") }

// StoredBytes is about how many bytes r takes where results are kept: its
// output, pictures (base64), payload and message. A tenant's result_bytes
// quota counts it.
func (r *Result) StoredBytes() int64 {
	n := len(r.Stdout) + len(r.Stderr) + len(r.Data) + len(r.Message)
	for _, img := range r.Images {
		n += (len(img.Data) + 2) / 3 * 4
	}
	for _, s := range r.Notes {
		n += len(s)
	}
	return int64(n)
}
