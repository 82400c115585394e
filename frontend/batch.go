package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// The batch tools: submit_jobs, get_job_results and cancel_batch, what
// `codexec batch` runs a batch through. A batch is named by a batch_id the
// client chooses (a long random string); its jobs run in a scope of their
// own, derived from the caller's principal (not its MCP session, so that
// the batch can be followed from another terminal or a later day) and the
// batch id: the jobs of one batch share a working directory on each
// worker, and no session or other principal's batch reads them.
//
// A job's id is derived from the batch's scope, its row and its attempt,
// so that a client resubmitting a row (it was killed before it knew the
// row was queued) sends the same id, and broker.SubmitJobs queues it once.
// Batch jobs go to the pool's batch subject, which workers take only in
// idle slots (worker/batch.go), and skip the fair gate and the runs
// history: they never queue ahead of an interactive job.

// MaxBatchJobs is how many jobs one submit_jobs or get_job_results call
// may carry.
const MaxBatchJobs = 256

// MaxBatchCallCode is how many bytes of code the jobs of one submit_jobs
// call may carry together (or the largest code a call may send, when that is
// more; a call's first job whatever its size). Each job is queued with its
// own copy of its code (a code too large for one message is a blob of its
// own), so the shared code of a call was stored once per job: a request of
// 4 MiB queued 1 GiB in JetStream, and one of 16 MiB would have queued
// 4 GiB, the body bounds notwithstanding. The jobs past it are answered
// internal, not queued, to be sent again in another call; `codexec batch`
// sends no more than this in one call.
const MaxBatchCallCode = 64 << 20

// MaxBatchResultBytes is how many bytes of output (stdout, stderr, message,
// files and notes, counted as JSON writes them) one get_job_results answer
// carries. A job's streams are each cut at the output limit (1 MiB), but
// 256 of them, or one job's id 256 times, made an answer of 512 MiB, six
// times that as JSON for control characters, and the frontend held several
// copies of it while it encoded it: one call of 64 ids of one job took a
// frontend from 40 MiB to 3 GiB. A finished job past it is answered
// running, with a message, to be asked for again (`codexec batch` asks for
// its unfinished jobs at every poll); the first job with output is answered
// whatever its size.
const MaxBatchResultBytes = 16 << 20

// maxBatchReads is how many job results get_job_results reads at once on a
// frontend, all calls together. A result with large output is a blob of
// its own, read in chunks over the frontend's one NATS connection: one call
// reading 16 results of 2 MiB at once (its bound then), on the 2-core
// development machine, timed its reads out and had the NATS connection
// dropped, failing the calls of every tenant in flight on that frontend,
// once per call. Small results are one read each, and 4 at once poll 256
// of them in a few milliseconds.
const maxBatchReads = 4

// batchQueueWait is how long a batch job may wait in the queue before no
// worker starts it (its deadline, beyond its timeout). `codexec batch`
// keeps few jobs queued at a time, so this is a bound for a pool that
// stays busy, not a wait any job should see.
const batchQueueWait = 15 * time.Minute

// batchIDRe accepts batch ids: long enough to be unguessable when random.
var batchIDRe = regexp.MustCompile(`^[A-Za-z0-9_-]{16,64}$`)

// BatchJobResult is one job of submit_jobs' or get_job_results' answer.
type BatchJobResult struct {
	Row     int64  `json:"row" jsonschema_description:"the row the job was submitted for"`
	Attempt int64  `json:"attempt"`
	JobID   string `json:"job_id"`
	// Status is queued, submitted_before or deferred (submit_jobs: not
	// queued for a quota of the caller's tenant; submit it again after
	// RetryAfterMS), running or a job's final status (get_job_results),
	// unknown (no such job), or rejected/internal when the job could not
	// be submitted.
	Status     string  `json:"status"`
	ExitCode   int     `json:"exit_code"`
	Stdout     string  `json:"stdout,omitempty"`
	Stderr     string  `json:"stderr,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	WorkerID   string  `json:"worker_id,omitempty"`
	Limit      string  `json:"limit,omitempty"`
	Message    string  `json:"message,omitempty"`
	// Files are the files the job wrote below its output folder
	// (wire.OutputDirEnv), relative to the working directory: resources/read
	// of codexec://workspace/<path>?batch=<batch_id> reads them. Notes say
	// what was left out.
	Files []string `json:"files,omitempty"`
	Notes []string `json:"notes,omitempty"`
	// RetryAfterMS is, for a deferred job, how long until the quota that
	// deferred it may admit it.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// BatchResult is the structured content of the batch tools.
type BatchResult struct {
	Status  string           `json:"status"`
	Jobs    []BatchJobResult `json:"jobs"`
	Message string           `json:"message,omitempty"`
}

func batchToolResult(r BatchResult) *mcp.CallToolResult {
	if r.Jobs == nil {
		r.Jobs = []BatchJobResult{}
	}
	text := r.Message
	if text == "" {
		text = countByStatus(r.Jobs)
	}
	out := mcp.NewToolResultStructured(r, statusLine(r.Status, text))
	out.IsError = r.Status != string(wire.StatusOK)
	return out
}

// countByStatus says how many jobs there are and how many of each status,
// in the order the statuses first come: "3 jobs: 1 queued, 2 rejected".
// It is the text of a batch tool's answer, which a model reads at a
// glance: the call's own status is ok even when every job was refused.
func countByStatus(jobs []BatchJobResult) string {
	var order []string
	n := map[string]int{}
	for _, j := range jobs {
		if n[j.Status] == 0 {
			order = append(order, j.Status)
		}
		n[j.Status]++
	}
	parts := make([]string, len(order))
	for i, st := range order {
		parts[i] = fmt.Sprintf("%d %s", n[st], st)
	}
	text := fmt.Sprintf("%d jobs", len(jobs))
	if len(jobs) == 1 {
		text = "1 job"
	}
	if len(parts) > 0 {
		text += ": " + strings.Join(parts, ", ")
	}
	return text
}

// batchFailure renders a failure of a batch tool.
func batchFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	return batchToolResult(BatchResult{Status: string(te.Status), Message: te.Message})
}

func (f *Frontend) registerBatchTools(s *server.MCPServer, stdio bool) {
	s.AddTool(mcp.NewTool("submit_jobs",
		mcp.WithDescription(fmt.Sprintf("Queue up to %d jobs of a batch run at once (the batch command-line client uses this). "+
			"Each job is a row: its code (or the shared code) runs with the row's params as JSON in the environment variable %s. "+
			"Batch jobs run only on idle worker slots, and count in the caller's tenant's quotas of jobs: a job over one is answered deferred, "+
			"with retry_after_ms, and queued only when submitted again. Returns each job's id; submitting a row and attempt again queues nothing.",
			MaxBatchJobs, wire.ParamsEnv)),
		mcp.WithString("batch_id", mcp.Required(), mcp.Description("the batch's id: 16 to 64 letters, digits, '-' or '_', random")),
		mcp.WithString("code", mcp.Description("Python source shared by the jobs that carry none of their own")),
		mcp.WithArray("jobs", mcp.Required(), mcp.Items(map[string]any{
			"type": "object",
			"properties": map[string]any{
				"row":      map[string]any{"type": "integer", "minimum": 0},
				"attempt":  map[string]any{"type": "integer", "minimum": 0},
				"code":     map[string]any{"type": "string"},
				"filename": map[string]any{"type": "string"},
				"params":   map[string]any{"type": "object"},
			},
			"required":             []string{"row"},
			"additionalProperties": false,
		}), mcp.Description("the jobs: row number, attempt (0 first), optional code, filename and params")),
		mcp.WithString("python_version", mcp.Description("Python version of the batch's environment, e.g. 3.12")),
		mcp.WithArray("packages", mcp.WithStringItems(), mcp.Description("requirements of the batch's environment")),
		f.runOptionsNoSchema(),
		mcp.WithOutputSchema[BatchResult](),
		hints(runsCode|idempotent),
	), handler(stdio, f.submitJobs, batchFailure))
	s.AddTool(mcp.NewTool("get_job_results",
		mcp.WithDescription(fmt.Sprintf("Fetch the status and output of up to %d jobs of a batch by job id: running while queued or running.", MaxBatchJobs)),
		mcp.WithString("batch_id", mcp.Required(), mcp.Description("the batch's id")),
		mcp.WithArray("job_ids", mcp.Required(), mcp.WithStringItems(), mcp.Description("job ids submit_jobs returned")),
		mcp.WithOutputSchema[BatchResult](),
		hints(readOnly),
	), handler(stdio, func(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
		return f.getJobResults(ctx, req, scope, stdio)
	}, batchFailure))
	s.AddTool(mcp.NewTool("cancel_batch",
		mcp.WithDescription("Cancel a batch: its jobs that no worker has started yet are not started, and those of job_ids that run are stopped (status cancelled)."),
		mcp.WithString("batch_id", mcp.Required(), mcp.Description("the batch's id")),
		mcp.WithArray("job_ids", mcp.WithStringItems(), mcp.Description(fmt.Sprintf("up to %d jobs of the batch to stop if they run (the client's unfinished ones)", MaxBatchJobs))),
		mcp.WithOutputSchema[BatchResult](),
		hints(destructive|idempotent),
	), handler(stdio, f.cancelBatch, batchFailure))
}

// runOptionsNoSchema are timeout_seconds and limits, as runOptions has them.
func (f *Frontend) runOptionsNoSchema() mcp.ToolOption {
	timeout := mcp.WithNumber("timeout_seconds", mcp.Description(fmt.Sprintf(
		"Wall-clock limit of each job in seconds (default %g, at most %g)", f.cfg.DefaultTimeout.Seconds(), f.cfg.MaxTimeout.Seconds())))
	limits := limitsOption()
	return func(t *mcp.Tool) {
		timeout(t)
		limits(t)
	}
}

// batchScope is the scope the jobs of batch id run in, for the caller of
// ctx: its principal (tenant and principal when authenticated; the
// Authorization header, hashed, of an unauthenticated request that has
// one; the one local principal on stdio) and the batch id, hashed.
func batchScope(ctx context.Context, stdio bool, id string) string {
	who := "anonymous"
	switch {
	case stdio:
		who = "stdio"
	case ctx.Value(identityKey{}) != nil:
		who, _ = ctx.Value(identityKey{}).(string)
	default:
		if p, ok := ctx.Value(principalKey{}).(string); ok {
			who = p
		}
	}
	return "b-" + digest(who+"\x00batch\x00"+id)
}

// batchArgs reads batch_id and derives the batch's scope.
func batchArgs(ctx context.Context, req mcp.CallToolRequest, scope string) (id, bscope string, err error) {
	id, _ = req.GetArguments()["batch_id"].(string)
	if !batchIDRe.MatchString(id) {
		return "", "", rejected("argument 'batch_id' must be 16 to 64 letters, digits, '-' or '_'")
	}
	return id, batchScope(ctx, scope == StdioScope, id), nil
}

// batchArg is the query argument of a workspace URI that names a batch
// (its batch_id): resources/read then reads the file in the batch's scope,
// the caller's own batch only (batchScope).
const batchArg = "batch"

// batchURIScope is the scope of the batch a workspace URI names (?batch=),
// for the caller of ctx: empty when it names none.
func batchURIScope(ctx context.Context, stdio bool, raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.Query().Has(batchArg) {
		return "", nil
	}
	id := u.Query().Get(batchArg)
	if !batchIDRe.MatchString(id) {
		return "", rejected("%s=%q: a batch id is 16 to 64 letters, digits, '-' or '_'", batchArg, id)
	}
	return batchScope(ctx, stdio, id), nil
}

// batchJobID is the id of attempt of row in the batch of scope bscope.
func batchJobID(bscope string, row, attempt int64) string {
	sum := sha256.Sum256([]byte(bscope + "\x00" + strconv.FormatInt(row, 10) + "\x00" + strconv.FormatInt(attempt, 10)))
	var id ulid.ULID
	copy(id[:], sum[:16])
	return id.String()
}

// batchRow is one job of a submit_jobs call.
// batchRowKeys are the keys of a job of submit_jobs, batchRow's: a job
// with another is refused, as a tool refuses an argument it does not take
// (a key that was ignored would queue the job without what it meant).
var batchRowKeys = []string{"row", "attempt", "code", "filename", "params"}

type batchRow struct {
	Row      *int64          `json:"row"`
	Attempt  int64           `json:"attempt"`
	Code     string          `json:"code"`
	Filename string          `json:"filename"`
	Params   json.RawMessage `json:"params"`
}

func (f *Frontend) submitJobs(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	id, bscope, err := batchArgs(ctx, req, scope)
	if err != nil {
		return nil, err
	}
	args := req.GetArguments()
	rows, err := batchRows(args)
	if err != nil {
		return nil, err
	}
	shared, err := optionalString(args, "code")
	if err != nil {
		return nil, err
	}
	run, err := f.runArgs(args)
	if err != nil {
		return nil, err
	}
	env, err := f.batchEnv(args)
	if err != nil {
		return nil, err
	}
	out := make([]BatchJobResult, len(rows))
	var jobs []*wire.Job
	var at []int
	now := time.Now().UTC()
	budget, code := max(MaxBatchCallCode, f.cfg.MaxCodeBytes), 0
	// The batch's directory is a workspace of its tenant (batch_quota.go):
	// recorded, so that it is listed and collected, and counted in
	// working_dir_bytes, which defers the whole call once passed.
	f.noteBatchOwner(ctx, bscope)
	deferred := f.admitBatchBytes(ctx)
	if deferred == nil {
		deferred = f.admitBatchBuild(ctx, env)
	}
	var places []quotaPlaces // per job queued: where it took a place
	for i, r := range rows {
		out[i] = BatchJobResult{Row: *r.Row, Attempt: r.Attempt, JobID: batchJobID(bscope, *r.Row, r.Attempt), ExitCode: -1}
		job, err := f.batchJob(ctx, id, bscope, shared, r, run, env, now)
		if err != nil {
			te := asToolError(err)
			out[i].Status, out[i].Message = string(te.Status), te.Message
			continue
		}
		if len(jobs) > 0 && code+len(job.Code) > budget {
			out[i].Status = string(wire.StatusInternal)
			out[i].Message = fmt.Sprintf("not queued: the jobs before it in this call carry %d bytes of code, and one call queues at most %d "+
				"(each job keeps a copy of its code); submit it again in another call", code, budget)
			continue
		}
		job.ID = out[i].JobID
		var taken quotaPlaces
		if deferred == nil {
			taken, deferred = f.admitBatchJob(ctx, job)
		}
		if deferred != nil {
			// The rows after a deferred one wait as well: the quota is
			// full now, and the batch keeps its order. A job submitted
			// before is not deferred: it needs no place.
			if f.batchJobRecorded(ctx, job.ID) {
				out[i].Status = "submitted_before"
			} else {
				out[i].Status, out[i].Message, out[i].RetryAfterMS = batchDeferred, deferred.message, deferred.retry.Milliseconds()
			}
			continue
		}
		code += len(job.Code)
		jobs, at, places = append(jobs, job), append(at, i), append(places, taken)
	}
	for k, err := range f.broker.SubmitJobs(ctx, jobs) {
		o := &out[at[k]]
		switch {
		case err == nil:
			o.Status = "queued"
		case errors.Is(err, broker.ErrJobSubmitted):
			o.Status = "submitted_before"
			f.batchResubmitted(ctx, jobs[k], places[k])
		case errors.Is(err, wire.ErrPayloadTooLarge):
			o.Status, o.Message = string(wire.StatusRejected), "code is too large to send"
		default:
			o.Status, o.Message = string(wire.StatusInternal), fmt.Sprintf("not queued (%v); submit this row and attempt again", err)
		}
		if err != nil && !errors.Is(err, broker.ErrJobSubmitted) {
			places[k].leave(ctx, f, jobs[k].ID)
		}
	}
	return batchToolResult(BatchResult{Status: string(wire.StatusOK), Jobs: out}), nil
}

// batchRows reads the jobs argument.
func batchRows(args map[string]any) ([]batchRow, error) {
	raw, ok := args["jobs"].([]any)
	if !ok || len(raw) == 0 {
		return nil, rejected("argument 'jobs' must be a non-empty array of jobs")
	}
	if len(raw) > MaxBatchJobs {
		return nil, rejected("%d jobs in one call; the limit is %d", len(raw), MaxBatchJobs)
	}
	for i, item := range raw {
		job, ok := item.(map[string]any)
		if !ok {
			continue // the decoding below says what a job is
		}
		for _, key := range slices.Sorted(maps.Keys(job)) {
			if !slices.Contains(batchRowKeys, key) {
				return nil, rejected("job %d of 'jobs' takes no key %q; nothing was queued. A job's keys: %s "+
					"(timeout_seconds, limits, python_version and packages are arguments of the call, for all its jobs)",
					i, key, strings.Join(batchRowKeys, ", "))
			}
		}
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, rejected("argument 'jobs': %v", err)
	}
	var rows []batchRow
	if err := json.Unmarshal(data, &rows); err != nil {
		return nil, rejected("argument 'jobs': each job is an object with row (an integer), attempt, code, filename and params (an object): %v", err)
	}
	for i, r := range rows {
		if r.Row == nil || *r.Row < 0 || r.Attempt < 0 {
			return nil, rejected("job %d of 'jobs': row (at least 0) is required, attempt is at least 0", i)
		}
		if len(r.Params) > 0 && (r.Params[0] != '{' || len(r.Params) > wire.MaxParamsBytes) {
			return nil, rejected("job %d of 'jobs': params must be an object of at most %d bytes", i, wire.MaxParamsBytes)
		}
	}
	return rows, nil
}

// batchEnv reads python_version and packages: nil without either.
func (f *Frontend) batchEnv(args map[string]any) (*envspec.Spec, error) {
	python, err := optionalString(args, "python_version")
	if err != nil {
		return nil, err
	}
	pkgs, err := stringList(args, "packages", false)
	if err != nil {
		return nil, err
	}
	if python == "" && len(pkgs) == 0 {
		return nil, nil
	}
	if err := f.parsePackages(pkgs); err != nil {
		return nil, err
	}
	spec, err := envspec.Spec{Manager: envspec.ManagerUV, Python: python, Packages: pkgs}.Normalize()
	if err != nil {
		return nil, rejected("%s", strings.TrimPrefix(err.Error(), envspec.ErrBadSpec.Error()+": "))
	}
	return &spec, nil
}

// batchJob is row r of batch id as a job (without its id).
func (f *Frontend) batchJob(ctx context.Context, id, bscope, shared string, r batchRow, run runArgs, env *envspec.Spec, now time.Time) (*wire.Job, error) {
	code := r.Code
	if code == "" {
		code = shared
	}
	switch {
	case strings.TrimSpace(code) == "":
		return nil, rejected("no code: neither the job nor the call has any")
	case len(code) > f.cfg.MaxCodeBytes:
		return nil, rejected("code is %d bytes; the limit is %d bytes", len(code), f.cfg.MaxCodeBytes)
	}
	job := &wire.Job{
		Kind: wire.KindExecute, Pool: f.cfg.Pool, Scope: bscope, Batch: id, Code: code,
		Filename: wire.CleanFilename(r.Filename), TimeoutMS: run.timeout.Milliseconds(), OutputLimit: f.cfg.OutputLimit,
		EnqueuedAt: now, Deadline: now.Add(run.timeout + batchQueueWait), Limits: run.limits, Params: r.Params,
		OutputDir: wire.BatchOutputDir(*r.Row), BatchRow: *r.Row, BatchAttempt: r.Attempt,
	}
	if env != nil {
		job.Env, job.EnvID = env, env.ID()
		job.Deadline = job.Deadline.Add(f.cfg.InstallTimeout)
	}
	if id, ok := auth.FromContext(ctx); ok {
		job.Tenant = id.Tenant
	}
	return job, nil
}

func (f *Frontend) getJobResults(ctx context.Context, req mcp.CallToolRequest, scope string, stdio bool) (*mcp.CallToolResult, error) {
	_, bscope, err := batchArgs(ctx, req, scope)
	if err != nil {
		return nil, err
	}
	ids, err := jobIDList(req.GetArguments(), true)
	if err != nil {
		return nil, err
	}
	budget := MaxBatchResultBytes
	if scope == StdioScope {
		budget = min(budget, f.stdioMessageLimit()-stdioRoom)
	}
	out := make([]BatchJobResult, len(ids))
	var wg sync.WaitGroup
	var mu sync.Mutex
	used, full := 0, false
	// fit answers r, or, when its output does not fit in what is left of
	// the budget, that it is to be asked for again.
	fit := func(r BatchJobResult) BatchJobResult {
		size := r.outputBytes()
		mu.Lock()
		defer mu.Unlock()
		if used > 0 && used+size > budget {
			full = true
			return BatchJobResult{Row: r.Row, Attempt: r.Attempt, JobID: r.JobID, ExitCode: -1, Status: string(statusRunning),
				Message: fmt.Sprintf("finished, but its output did not fit in this answer (at most %d bytes of output in one answer); ask for it again", budget)}
		}
		used += size
		return r
	}
	// A job named more than once is read once. Jobs are read a few at a
	// time (batchReads, shared by every call), and each takes its place in
	// the answer in the order asked: a job waits for the one asked before
	// it, holding its read slot, so that the first jobs asked are the ones
	// answered whatever order their reads end in, and a call holds at most
	// maxBatchReads results not yet fitted.
	first := make(map[string]int, len(ids))
	prev := make(chan struct{})
	close(prev)
	ended := false
	for i, jid := range ids {
		if _, seen := first[jid]; seen {
			continue
		}
		first[jid] = i
		if !ended {
			select {
			case f.batchReads <- struct{}{}:
			case <-ctx.Done():
				ended = true
			}
		}
		if ended {
			out[i] = BatchJobResult{JobID: jid, ExitCode: -1, Status: string(wire.StatusInternal), Message: "not read: the call ended; ask again"}
			continue
		}
		before, done := prev, make(chan struct{})
		prev = done
		wg.Go(func() {
			defer func() { <-f.batchReads }()
			defer close(done)
			// Once the answer is full, the jobs left are not read: each
			// finished one would be answered to ask again, and reading
			// them cost a frontend seconds and its connection to NATS
			// (64 results of 2 MiB read at once timed its reads out).
			mu.Lock()
			skip := full || used >= budget
			mu.Unlock()
			if skip {
				<-before
				out[i] = BatchJobResult{JobID: jid, ExitCode: -1, Status: string(statusRunning),
					Message: fmt.Sprintf("not read: this answer is full (at most %d bytes of output in one answer); ask for it again", budget)}
				return
			}
			r := f.batchJobResult(ctx, bscope, jid)
			<-before
			out[i] = fit(r)
		})
	}
	wg.Wait()
	for i, jid := range ids {
		if k := first[jid]; k != i {
			out[i] = fit(out[k])
		}
	}
	if stdio {
		// A first job whose output alone passes one message.
		fitBatchOutputs(out, f.stdioMessageLimit())
	}
	return batchToolResult(BatchResult{Status: string(wire.StatusOK), Jobs: out}), nil
}

// outputBytes is how many bytes r's output takes as JSON (jsonLen).
func (r BatchJobResult) outputBytes() int {
	n := jsonLen(r.Stdout) + jsonLen(r.Stderr) + jsonLen(r.Message)
	for _, s := range r.Files {
		n += jsonLen(s)
	}
	for _, s := range r.Notes {
		n += jsonLen(s)
	}
	return n
}

// batchJobResult is the state of job id of the batch of scope bscope: its
// result, running, expired, or unknown (no such job of this batch).
func (f *Frontend) batchJobResult(ctx context.Context, bscope, id string) BatchJobResult {
	out := BatchJobResult{JobID: id, ExitCode: -1, Status: "unknown"}
	if _, err := ulid.ParseStrict(id); err != nil {
		out.Message = "not a job id"
		return out
	}
	res, err := f.broker.GetResult(ctx, id)
	switch {
	case err == nil && res.Scope == bscope:
		return BatchJobResult{
			Row: res.BatchRow, Attempt: res.BatchAttempt, JobID: id, Status: string(res.Status), ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr,
			DurationMS: res.DurationMS, WorkerID: res.WorkerID, Limit: res.Limit, Message: res.Message,
			Files: res.Files, Notes: res.Notes,
		}
	case err == nil:
		return out
	case !errors.Is(err, wire.ErrResultNotFound):
		out.Status, out.Message = string(wire.StatusInternal), fmt.Sprintf("reading the result failed: %v; ask again", err)
		return out
	}
	rec, err := f.broker.GetJobRecord(ctx, id)
	switch {
	case errors.Is(err, broker.ErrNoJobRecord):
	case err != nil:
		out.Status, out.Message = string(wire.StatusInternal), fmt.Sprintf("reading the job's record failed: %v; ask again", err)
	case rec.Scope != bscope:
	case time.Now().Before(settledBy(rec)):
		out.Row, out.Attempt = rec.BatchRow, rec.BatchAttempt
		out.Status = string(statusRunning)
	default:
		out.Row, out.Attempt = rec.BatchRow, rec.BatchAttempt
		out.Status, out.Message = string(wire.StatusExpired), "no worker ran the job before its deadline"
	}
	return out
}

func (f *Frontend) cancelBatch(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	id, bscope, err := batchArgs(ctx, req, scope)
	if err != nil {
		return nil, err
	}
	ids, err := jobIDList(req.GetArguments(), false)
	if err != nil {
		return nil, err
	}
	if !f.batchSubmitted(ctx, bscope) {
		return batchToolResult(BatchResult{Status: string(wire.StatusOK),
			Message: fmt.Sprintf("batch %s has no jobs: nothing was submitted to it, nothing to cancel", id)}), nil
	}
	if err := f.broker.CancelBatch(ctx, bscope); err != nil {
		return nil, internal("cancelling batch %s failed: %v; try again", id, err)
	}
	stopped := 0
	for _, jid := range ids {
		if f.batchJobOf(ctx, bscope, jid) {
			if err := f.broker.CancelJob(ctx, jid); err != nil {
				return nil, internal("cancelling job %s of batch %s failed: %v; try again", jid, id, err)
			}
			stopped++
		}
	}
	return batchToolResult(BatchResult{Status: string(wire.StatusOK),
		Message: fmt.Sprintf("batch %s cancelled: its jobs that no worker has started will not start, and %d of its jobs were told to stop if they run", id, stopped)}), nil
}

// batchSubmitted says whether a submit_jobs call submitted to the batch of
// scope bscope: its owner is recorded (noteBatchOwner), by the caller, since
// the scope derives from the caller's identity. cancel_batch writes its mark
// only then: the mark stays as long as results, and a tenant calling
// cancel_batch with a new batch id each time (600 calls a second from one
// client) left keys in the results bucket that no quota counted. When the
// store does not answer, the batch counts as submitted: a cancel matters
// more than a key.
func (f *Frontend) batchSubmitted(ctx context.Context, bscope string) bool {
	_, err := f.store.Get(ctx, f.cfg.Keys.ScopeOwner(bscope))
	return !errors.Is(err, statestore.ErrNotFound)
}

// jobIDList reads job_ids: at most MaxBatchJobs strings.
func jobIDList(args map[string]any, required bool) ([]string, error) {
	v, present := args["job_ids"]
	if !present || v == nil {
		if required {
			return nil, rejected("missing required argument 'job_ids' (a list of job ids)")
		}
		return nil, nil
	}
	items, ok := v.([]any)
	if !ok {
		return nil, rejected("argument 'job_ids' must be a list of job ids")
	}
	if len(items) > MaxBatchJobs {
		return nil, rejected("%d job ids in one call; the limit is %d", len(items), MaxBatchJobs)
	}
	ids := make([]string, len(items))
	for i, it := range items {
		if ids[i], ok = it.(string); !ok {
			return nil, rejected("item %d of 'job_ids' is not a string", i+1)
		}
	}
	return ids, nil
}

// batchJobOf says whether job id is one of the batch of scope bscope (its
// record says so), so that cancel_batch never cancels another's job.
func (f *Frontend) batchJobOf(ctx context.Context, bscope, id string) bool {
	if _, err := ulid.ParseStrict(id); err != nil {
		return false
	}
	rec, err := f.broker.GetJobRecord(ctx, id)
	return err == nil && rec.Scope == bscope
}
