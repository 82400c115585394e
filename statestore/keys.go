package statestore

// Key helpers. Every key codexec writes is built here, so the layout of the
// keyspace is visible in one place and a prefix isolates one deployment (or
// one test) from another.

// DefaultPrefix is the prefix of every key of a deployment that names none.
const DefaultPrefix = "codexec:"

// Keys builds keys under one prefix (DefaultPrefix unless a deployment or a
// test chooses another).
type Keys struct{ Prefix string }

// Workers is the presence set of live workers.
func (k Keys) Workers() string { return k.Prefix + "workers" }

// Claimants is the presence set of workers running claimed jobs: member
// worker id, data the worker's instance and the jobs it runs. Its records
// live a few seconds, much less than Workers', so that a dead worker's jobs
// are taken over soon after its death (see worker/claim.go).
func (k Keys) Claimants() string { return k.Prefix + "claimants" }

// Session is the hash holding one session scope's settings.
func (k Keys) Session(scope string) string { return k.Prefix + "session:" + scope }

// presenceDataKey is the Redis hash that holds the data of presence set set;
// the set itself is a sorted set stored under set. See the package comment.
func presenceDataKey(set string) string { return set + ":data" }

// Code files and the runs history of a session. scope must satisfy
// wire.ValidScope and name must be a validated code-file name (one path
// element of [A-Za-z0-9._-], see frontend/paths.go), so neither contains ':'
// and every key below belongs to exactly one (scope, name) pair. jobID is a
// ULID. Callers validate; these helpers only concatenate.

// CodeFile is the string holding the content of code file name of scope.
// It grows by Append, so an append costs the appended bytes only.
func (k Keys) CodeFile(scope, name string) string {
	return k.Prefix + "file:" + scope + ":" + name
}

// CodeFiles is the hash indexing scope's code files: file name → metadata
// (JSON: size at the last write, created, updated).
func (k Keys) CodeFiles(scope string) string { return k.Prefix + "files:" + scope }

// Run is the string that held the code of job jobID of scope before runs
// shared their code (RunCode): runs recorded then are still read from it
// until their retention ends. Nothing writes it any more.
func (k Keys) Run(scope, jobID string) string { return k.Prefix + "run:" + scope + ":" + jobID }

// RunCode is the string holding code that scope ran, once per distinct
// content: sha256 is the code's SHA-256 in lower-case hex. It is a shared
// value (Store.Link) of the index Runs(scope).
func (k Keys) RunCode(scope, sha256 string) string { return k.Prefix + "code:" + scope + ":" + sha256 }

// Runs is the hash indexing scope's recorded runs: job id → metadata (JSON:
// file name, size, time, the code file it came from, the SHA-256 of the
// code). It is the index of the shared values RunCode(scope, …), so
// Runs(scope)+":links" and Runs(scope)+":refs" are taken too.
func (k Keys) Runs(scope string) string { return k.Prefix + "runs:" + scope }

// Usage is the byte counter (Store's Quota) of what scope keeps in the
// store: its code files and the distinct code of its recorded runs.
func (k Keys) Usage(scope string) string { return k.Prefix + "usage:" + scope }

// Scopes is the hash of every session scope that has code files or recorded
// runs: scope → unix milliseconds of its latest write. The Store has no key
// scan, so `codexec export` finds sessions here.
func (k Keys) Scopes() string { return k.Prefix + "scopes" }

// Workspace is the string holding where scope's working directory is kept
// (JSON: wire.Workspace, the holding worker and the snapshot of its files).
func (k Keys) Workspace(scope string) string { return k.Prefix + "workspace:" + scope }

// Handle is the string holding what a workspace handle names (JSON: the
// scope, its owner, when it was made). id is a hex digest of the handle and
// its owner (frontend/handles.go), so a handle alone names no key.
func (k Keys) Handle(id string) string { return k.Prefix + "handle:" + id }

// Quota is the presence set (Store's Admitter) of quota name of a tenant:
// tenant is a hex digest of the tenant's name (frontend/quotas.go).
func (k Keys) Quota(name, tenant string) string { return k.Prefix + "quota:" + name + ":" + tenant }

// Audit is the string of one tenant's audit records of one day (JSON
// Lines, appended): tenant is a hex digest of the tenant's name, day is
// YYYYMMDD in UTC (wire/audit.go).
func (k Keys) Audit(tenant, day string) string { return k.Prefix + "audit:" + tenant + ":" + day }

// AuditTenants is the hash of the tenants with audit records: digest →
// the tenant's name.
func (k Keys) AuditTenants() string { return k.Prefix + "audittenants" }

// Revoked is the hash of revoked credentials: field a JSON array
// [tenant, principal] (principal "" for the whole tenant), value when.
func (k Keys) Revoked() string { return k.Prefix + "revoked" }

// ScopeOwner is the string holding whose scope is and when a frontend
// first served it (JSON, frontend/owners.go); ScopeOwners indexes those
// strings (scope → "1"), since the Store has no key scan.
func (k Keys) ScopeOwner(scope string) string { return k.Prefix + "owner:" + scope }

// ScopeOwners is the index of ScopeOwner records.
func (k Keys) ScopeOwners() string { return k.Prefix + "owners" }

// ScopeHandle is the string holding the handle of scope's workspace, once
// it has one.
func (k Keys) ScopeHandle(scope string) string { return k.Prefix + "scopehandle:" + scope }

// Contexts is the hash of scope's live contexts: context id → its record
// (wire.ContextRecord: the worker that holds it). scope satisfies
// wire.ValidScope, so the key belongs to one scope.
func (k Keys) Contexts(scope string) string { return k.Prefix + "contexts:" + scope }
