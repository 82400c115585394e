// Package wire holds the types that travel between frontends and workers:
// jobs, results, their version, the subject names and the sentinel errors.
//
// It imports only envspec (the environment a job runs in is an envspec.Spec,
// the one type of that concept), so every other package can import it
// without cycles. Changing a field's meaning is a wire-protocol
// change; bump Version when an old peer would misread a new message.
package wire

import (
	"encoding/json"
	"errors"
	"regexp"
	"time"

	"github.com/codexec/codexec/envspec"
)

// Version is the wire-protocol version stamped on every job and result.
// A peer refuses a message whose version it does not know.
const Version = 1

// JobKind says what a worker is asked to do.
type JobKind string

const (
	// KindExecute runs Python code in a fresh process.
	KindExecute JobKind = "execute"
	// KindInstall makes sure the job's environment (Job.Env) is built on
	// the worker, streaming the installer's output as progress, and returns
	// the installed distributions (InstallData in Result.Data).
	KindInstall JobKind = "install"
	// KindInspect looks packages up in the job's environment without
	// importing them (Job.Packages in, InspectData in Result.Data).
	KindInspect JobKind = "inspect"
)

// InstallData is Result.Data of an install job.
type InstallData struct {
	EnvID     string         `json:"env_id"`
	Installed []envspec.Dist `json:"installed"`
	BuildMS   float64        `json:"build_ms"`
	Cached    bool           `json:"cached"` // the environment was already ready on the worker
}

// InspectData is Result.Data of an inspect job: one answer per asked name,
// in order; Found false leaves Dist empty.
type InspectData struct {
	EnvID    string          `json:"env_id"`
	Packages []InspectAnswer `json:"packages"`
}

// InspectAnswer answers one name of an inspect job.
type InspectAnswer struct {
	Query string       `json:"query"`
	Found bool         `json:"found"`
	Dist  envspec.Dist `json:"dist"`
}

// Job is one unit of work published on the jobs stream.
type Job struct {
	V    int     `json:"v"`
	ID   string  `json:"id"` // ULID; also the JetStream dedup id and the result key
	Kind JobKind `json:"kind"`
	// Pool names the worker pool whose consumer receives the job.
	Pool string `json:"pool"`
	// Scope is the session scope the job belongs to (see ValidScope). It is
	// derived by the frontend, never copied from client input.
	Scope string `json:"scope"`
	// Tenant is the account the job is charged to, from the caller's
	// credentials; empty without authentication. The frontend
	// shares the pool fairly among tenants first, then among the scopes of
	// a tenant (frontend/fair.go); a job without a tenant is its scope's
	// own tenant. Workers do not read it.
	Tenant string `json:"tenant,omitempty"`
	// Principal is who, within Tenant, sent the job (for the audit log).
	Principal string `json:"principal,omitempty"`
	// Code is the Python source. Empty when CodeRef is set.
	Code string `json:"code,omitempty"`
	// CodeRef names a blob in the object store that holds the code, used when
	// the job would not fit in one NATS message.
	CodeRef string `json:"code_ref,omitempty"`
	// Filename is the already-sanitized name the script is saved under.
	Filename string `json:"filename,omitempty"`
	// TimeoutMS is the wall-clock limit for the run, in milliseconds.
	TimeoutMS int64 `json:"timeout_ms"`
	// OutputLimit caps stdout and stderr, each, in bytes. 0 means the worker default.
	OutputLimit int64 `json:"output_limit,omitempty"`
	// EnqueuedAt is when the frontend published the job.
	EnqueuedAt time.Time `json:"enqueued_at"`
	// Deadline is when the frontend stops waiting; a worker that receives the
	// job after it does not start it.
	Deadline time.Time `json:"deadline"`
	// Env is the environment to run in; nil means the worker's default.
	Env *envspec.Spec `json:"env,omitempty"`
	// EnvID is the frontend's id of Env (envspec.Spec.ID); informational,
	// the worker recomputes it.
	EnvID string `json:"env_id,omitempty"`
	// Packages are the names an inspect job looks up.
	Packages []string `json:"packages,omitempty"`
	// Progress, when set, asks the worker to publish progress lines on
	// ProgressSubject(ID) while it builds the environment.
	Progress bool `json:"progress,omitempty"`
	// Limits are the call's own resource limits; nil, or a zero field,
	// means the worker's default. The worker refuses values above its
	// pool's maximums.
	Limits *Limits `json:"limits,omitempty"`
	// TraceParent and TraceState are the W3C trace context of the MCP
	// call the job serves, from the request's _meta, when it had a valid
	// one (see ValidTraceParent); the worker logs them with the job.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// GPU, when set, asks for GPUs: the frontend sends the job to a
	// worker that has them, which runs it once it holds them alone.
	GPU *envspec.GPURequest `json:"gpu,omitempty"`
	// Batch, when set, names the batch run the job belongs to (wire/batch.go):
	// it is queued on BatchSubject and its scope is the batch's own.
	Batch string `json:"batch,omitempty"`
	// Params is a batch job's parameter row, a JSON object given to the
	// script in the environment variable ParamsEnv.
	Params json.RawMessage `json:"params,omitempty"`
	// OutputDir is a batch job's own output folder, relative to the
	// working directory (OutputDirEnv tells the script); the result's
	// Files are then the files the job wrote below it.
	OutputDir string `json:"output_dir,omitempty"`
	// BatchRow and BatchAttempt are a batch job's row and attempt, as
	// submit_jobs was given them; its result and record carry them back.
	BatchRow     int64 `json:"batch_row,omitempty"`
	BatchAttempt int64 `json:"batch_attempt,omitempty"`
	// File is what a files job (KindFiles) does.
	File *FileOp `json:"file,omitempty"`
	// KnownHolder is set by a frontend that could not read the session's
	// workspace record (the state store away): the worker that held the
	// session's working directory as the frontend last knew it, or
	// NoHolder when it knew the session had none; empty when it knew
	// nothing. A worker that cannot read the record either runs the job
	// only on a copy of the session's files it knows to be the newest
	// (worker/workspaces.go), and answers StatusInternal otherwise.
	KnownHolder string `json:"known_holder,omitempty"`
}

// NoHolder is Job.KnownHolder for a session the frontend knew to have no
// working directory anywhere. It is no valid worker id (ValidWorkerID).
const NoHolder = "-"

// Limits are the resource limits a call asks for, in the units of the
// execute_code parameter of the same name. A zero field means the worker's
// default for it. MB means MiB (1,048,576 bytes).
type Limits struct {
	// MemoryMB is the memory of all the job's processes together.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// CPUSeconds is the CPU time of each process.
	CPUSeconds int64 `json:"cpu_seconds,omitempty"`
	// Processes counts processes and threads.
	Processes int64 `json:"processes,omitempty"`
	// FileSizeMB is the largest file the job may write.
	FileSizeMB int64 `json:"file_size_mb,omitempty"`
	// DiskMB is the space the job may use in the session's working directory.
	DiskMB int64 `json:"disk_mb,omitempty"`
	// OpenFiles counts open descriptors per process.
	OpenFiles int64 `json:"open_files,omitempty"`
}

// Status is the outcome of a job.
type Status string

const (
	StatusOK       Status = "ok"       // exit code 0
	StatusError    Status = "error"    // exception or non-zero exit
	StatusTimeout  Status = "timeout"  // wall-clock limit hit, process group killed
	StatusLimit    Status = "limit"    // another resource limit hit
	StatusRejected Status = "rejected" // bad input, nothing ran
	StatusInternal Status = "internal" // the system failed, not the code
	StatusExpired  Status = "expired"  // the job's deadline passed before it started
	// StatusCancelled: its caller cancelled it; it was stopped, with
	// every process it started, or removed from the queue before it ran.
	StatusCancelled Status = "cancelled"
)

// Names of the limits a job can hit, as Result.Limit reports them.
const (
	LimitMemory    = "memory"
	LimitCPU       = "cpu"
	LimitProcesses = "processes"
	LimitFileSize  = "file_size"
	LimitDisk      = "disk"
	LimitOpenFiles = "open_files"
	LimitOutput    = "output"
)

// Failed reports whether s is any status other than StatusOK.
func (s Status) Failed() bool { return s != StatusOK }

// Result is what a worker reports for a job. It is stored under the job id
// for the configured retention, so it outlives the connection that asked.
type Result struct {
	V     int    `json:"v"`
	JobID string `json:"job_id"`
	// BatchRow and BatchAttempt are a batch job's (Job.BatchRow,
	// Job.BatchAttempt).
	BatchRow     int64 `json:"batch_row,omitempty"`
	BatchAttempt int64 `json:"batch_attempt,omitempty"`
	// Scope is the session scope of the job, so a result is only ever shown
	// to the session that asked for it.
	Scope  string `json:"scope"`
	Status Status `json:"status"`
	// ExitCode is the process exit code; -1 when it was killed by a signal.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended the process, if one did.
	Signal string `json:"signal,omitempty"`
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutTruncated and StderrTruncated say a stream hit the output limit;
	// StdoutBytes and StderrBytes count everything the process wrote.
	StdoutTruncated bool  `json:"stdout_truncated"`
	StderrTruncated bool  `json:"stderr_truncated"`
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	// StdoutFile and StderrFile name, relative to the session's working
	// directory, the file that holds the whole stream of a truncated one
	// (Stdout then keeps its first and last bytes around a line that says
	// what was dropped); empty when it was not truncated or not kept.
	StdoutFile string `json:"stdout_file,omitempty"`
	StderrFile string `json:"stderr_file,omitempty"`
	// Images are the pictures the job displayed (PNG), in order, within
	// the worker's limits; Notes say, one line each, what was left out.
	Images []Image  `json:"images,omitempty"`
	Notes  []string `json:"notes,omitempty"`
	// Files are the files of the working directory an execution made or
	// changed (slash-separated, relative to it), at most MaxChangedFiles.
	Files []string `json:"files,omitempty"`
	// DurationMS is the wall-clock run time of the process.
	DurationMS float64 `json:"duration_ms"`
	WorkerID   string  `json:"worker_id"`
	EnvID      string  `json:"env_id,omitempty"`
	// ScriptPath is where the worker saved the script, on the worker's disk.
	ScriptPath string `json:"script_path,omitempty"`
	// Message is a one-line, human-readable status ("exit code 1", "timed out after 5s").
	Message string `json:"message,omitempty"`
	// Limit is the name of the limit the job hit (one of the Limit*
	// constants: "memory", "cpu", "processes", "file_size", "disk",
	// "open_files", "output"), empty otherwise.
	Limit string `json:"limit,omitempty"`
	// Attempt is the JetStream delivery number that produced the result.
	Attempt    int       `json:"attempt"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Data is the kind-specific payload of install and inspect jobs
	// (InstallData, InspectData).
	Data json.RawMessage `json:"data,omitempty"`
	// GPU says which GPUs ran a job that asked for some.
	GPU *GPUUsage `json:"gpu,omitempty"`
	// Tenant, Principal and CodeSHA256 are the job's, for the audit
	// (wire/audit.go): who ran what.
	Tenant     string `json:"tenant,omitempty"`
	Principal  string `json:"principal,omitempty"`
	CodeSHA256 string `json:"code_sha256,omitempty"`
}

// Image is a picture a job displayed.
type Image struct {
	MIMEType string `json:"mime_type"`
	Data     []byte `json:"data"` // base64 in JSON
}

// DefaultMaxTimeout is the largest wall-clock limit of a job (TimeoutMS)
// unless the operator sets --max-timeout: the most a frontend lets a call
// ask for and the most a worker runs a job for. Both roles default to this
// one constant, so a cluster that sets neither agrees.
const DefaultMaxTimeout = 10 * time.Minute

// Subject and resource names. Pool names are validated by ValidPool, so a
// subject built from one never carries wildcards or separators.
const (
	JobsStream     = "CODEXEC_JOBS"
	JobsSubjectPre = "codexec.jobs."
	ResultsBucket  = "codexec-results"
	BlobsBucket    = "codexec-blobs"
	DefaultPool    = "default"
)

// JobSubject is the subject jobs for pool are published on.
func JobSubject(pool string) string { return JobsSubjectPre + pool }

// ConsumerName is the durable pull consumer shared by the workers of pool.
func ConsumerName(pool string) string { return "pool-" + pool }

// WorkerSubject is the subject of jobs sent to one worker of pool (placement
// chose it because it holds the job's environment). It has three tokens
// after the prefix, so the pool's consumer never takes them.
func WorkerSubject(pool, worker string) string { return JobsSubjectPre + pool + ".w." + worker }

// WorkerConsumerName is the durable consumer of WorkerSubject.
func WorkerConsumerName(pool, worker string) string { return "pool-" + pool + "-w-" + worker }

// ProgressSubject is the core NATS subject progress lines of job id are
// published on (not stored in JetStream: progress is best effort).
func ProgressSubject(jobID string) string { return "codexec.progress." + jobID }

// ValidWorkerID reports whether id may name a worker in subjects and
// consumer names.
func ValidWorkerID(id string) bool { return workerRe.MatchString(id) }

var (
	poolRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)
	scopeRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	workerRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
)

// ValidPool reports whether name is a usable pool name: lower-case letters,
// digits, '-' and '_', at most 32 characters.
func ValidPool(name string) bool { return poolRe.MatchString(name) }

// ValidScope reports whether s is a well-formed session scope: lower-case
// letters, digits and '-', at most 64 characters. Scopes name directories on
// workers, so nothing else is ever accepted.
func ValidScope(s string) bool { return scopeRe.MatchString(s) }

// Sentinel errors shared by frontends and workers.
var (
	ErrResultNotFound  = errors.New("codexec: result not found")
	ErrBadVersion      = errors.New("codexec: unknown wire version")
	ErrPayloadTooLarge = errors.New("codexec: payload too large")
)

// ResultStub stands in, in the results bucket, for a Result whose encoding
// does not fit one NATS message: the encoded Result is the object BlobRef in
// BlobsBucket. Only the broker writes and resolves stubs; readers of
// results never see one.
type ResultStub struct {
	V       int    `json:"v"`
	JobID   string `json:"job_id"`
	BlobRef string `json:"blob_ref"`
	// Size is the length in bytes of the encoded Result in the blob.
	Size int64 `json:"blob_size"`
}
