package statestore

// Byte totals of a tenant, for its quotas (frontend/quotas_bytes.go).
// tenant is a hex digest of the tenant's name (wire.TenantKey).

// TenantCodeBytes is the byte counter (the Outer of a workspace's Quota) of
// what a tenant's code files take, over all its workspaces.
func (k Keys) TenantCodeBytes(tenant string) string { return k.Prefix + "codebytes:" + tenant }

// TenantWorkdirs is the tally (Tallier) of a tenant's working directories:
// workspace scope → the bytes its files took after its latest job, as the
// worker that ran it measured; TallySumKey of it is their sum.
func (k Keys) TenantWorkdirs(tenant string) string { return k.Prefix + "workdirs:" + tenant }

// TenantJobs is the presence set of a tenant's jobs queued or running
// (the jobs quota, frontend/quota.Jobs), whose members are job ids. The
// worker that stores a batch job's result takes the job out of it.
func (k Keys) TenantJobs(tenant string) string { return k.Quota("jobs", tenant) }

// TenantResultBytes is the hash of the bytes a tenant's jobs stored as
// results, field ResultBytesField(hour, worker) → the bytes the results of
// that worker stored in that hour (the worker is the field's only writer).
// The frontend sums the hours still within the results' retention for the
// result_bytes quota.
func (k Keys) TenantResultBytes(tenant string) string { return k.Prefix + "resultbytes:" + tenant }
