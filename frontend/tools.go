package frontend

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// ExecResult is the structured content of execute_code and get_job_result.
type ExecResult struct {
	JobID           string  `json:"job_id" jsonschema_description:"ULID of the job; get_job_result fetches it again (empty for a call in a context, which is no job)"`
	Status          string  `json:"status" jsonschema_description:"ok, error, timeout, limit, rejected, expired, cancelled or internal; get_job_result also says running for a job not finished yet"`
	ExitCode        int     `json:"exit_code" jsonschema_description:"process exit code; -1 when killed by a signal or never run"`
	Stdout          string  `json:"stdout"`
	Stderr          string  `json:"stderr"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	StdoutBytes     int64   `json:"stdout_bytes" jsonschema_description:"bytes the process wrote to stdout, including any cut off"`
	StderrBytes     int64   `json:"stderr_bytes" jsonschema_description:"bytes the process wrote to stderr, including any cut off"`
	DurationMS      float64 `json:"duration_ms"`
	WorkerID        string  `json:"worker_id"`
	EnvID           string  `json:"env_id"`
	Filename        string  `json:"filename,omitempty" jsonschema_description:"the name the script was saved under"`
	Signal          string  `json:"signal,omitempty"`
	Limit           string  `json:"limit,omitempty" jsonschema_description:"the limit the job hit: memory, cpu, processes, file_size, disk, open_files or output"`
	Message         string  `json:"message" jsonschema_description:"one-line status"`

	// GPU is set for a call that asked for GPUs.
	GPU *GPUResult `json:"gpu,omitempty" jsonschema_description:"the GPUs the job ran on"`
	OutputFiles
	Pictures
}

// hint is a tool annotation hint that holds (the others do not).
type hint uint8

const (
	readOnly    hint = 1 << iota // changes nothing; hints implies idempotent
	destructive                  // may delete or overwrite, not only add
	idempotent                   // a repeated call with the same arguments does nothing more
	openWorld                    // reaches beyond codexec (code that runs, a package index)
	// runsCode is a tool that runs the caller's code: anything it does
	// the code may do.
	runsCode = destructive | openWorld
)

// hints sets all four annotation hints of a tool, the given ones true and
// the rest false. mcp-go's NewTool starts with destructiveHint and
// openWorldHint true, so a hint left unset would claim what a tool does
// not do (a read-only tool that is destructive).
func hints(h hint) mcp.ToolOption {
	if h&readOnly != 0 {
		h |= idempotent
	}
	return func(t *mcp.Tool) {
		set := func(b hint) *bool { v := h&b != 0; return &v }
		t.Annotations.ReadOnlyHint = set(readOnly)
		t.Annotations.DestructiveHint = set(destructive)
		t.Annotations.IdempotentHint = set(idempotent)
		t.Annotations.OpenWorldHint = set(openWorld)
	}
}

func (f *Frontend) registerTools(s *server.MCPServer, stdio bool) {
	s.AddTool(mcp.NewTool("execute_code",
		mcp.WithDescription("Run Python code in a fresh interpreter in this session's environment and working directory. "+
			"Returns stdout, stderr, the exit code and status; isError is true when the code raised, exited non-zero, timed out or hit a limit. "+
			"Optional limits (memory_mb, cpu_seconds, processes, file_size_mb, disk_mb, open_files) change this call's resource limits, up to the pool's maximums. "+
			"The code runs sandboxed: it sees its environment and the session's working directory (files persist there between calls), "+
			"usually without network access; add packages with install_dependencies, not pip. "+
			"matplotlib figures (plt.show(), or left open at the end) and display(obj) of pictures come back as images; display(df) prints a table as text. "+
			"Files the code wrote are linked as codexec://workspace/<path> resources."),
		mcp.WithString("code", mcp.Required(), mcp.Description("Python source to run")),
		mcp.WithString("filename", mcp.Description("Name to save the script under (sanitized; '.py' is added when missing)")),
		f.runOptions(),
	), handler(stdio, f.executeCode, execFailure))

	s.AddTool(mcp.NewTool("get_job_result",
		mcp.WithDescription("Fetch the result of an earlier job of this session by its job_id, e.g. after a call was interrupted. Results are kept for a limited time."),
		mcp.WithString("job_id", mcp.Required(), mcp.Description("The job_id an earlier call returned")),
		mcp.WithOutputSchema[ExecResult](),
		hints(readOnly),
	), handler(stdio, f.getJobResult, execFailure))

	f.registerFileTools(s, stdio)
	f.registerWorkspaceFiles(s, stdio)
	f.registerEnvTools(s, stdio)
	f.registerContextTools(s, stdio)
	f.registerBatchTools(s, stdio)
}

func (f *Frontend) executeCode(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	code, ok := args["code"].(string)
	if !ok {
		if _, present := args["code"]; !present {
			return nil, rejected("missing required argument 'code' (a string of Python source)")
		}
		return nil, rejected("argument 'code' must be a string")
	}
	if strings.TrimSpace(code) == "" {
		return nil, rejected("argument 'code' is empty: nothing to run")
	}
	if len(code) > f.cfg.MaxCodeBytes {
		return nil, rejected("code is %d bytes; the limit is %d bytes (%d MiB)", len(code), f.cfg.MaxCodeBytes, f.cfg.MaxCodeBytes>>20)
	}
	filename, err := optionalString(args, "filename")
	if err != nil {
		return nil, err
	}
	run, err := f.runArgs(args)
	if err != nil {
		return nil, err
	}
	return f.runCode(ctx, scope, code, wire.CleanFilename(filename), "", run)
}

// runArgs are the arguments shared by every tool that runs code (see
// runOptions).
type runArgs struct {
	timeout time.Duration
	// limits are the call's own resource limits; nil means the pool's
	// defaults.
	limits *wire.Limits
	// gpu is the call's GPU request; nil asks for none.
	gpu *envspec.GPURequest
}

// runArgs reads timeout_seconds and limits.
func (f *Frontend) runArgs(args map[string]any) (runArgs, error) {
	timeout, err := f.timeoutArg(args)
	if err != nil {
		return runArgs{}, err
	}
	lim, err := limitsArg(args)
	if err != nil {
		return runArgs{}, err
	}
	gpu, err := gpuArg(args)
	if err != nil {
		return runArgs{}, err
	}
	return runArgs{timeout: timeout, limits: lim, gpu: gpu}, nil
}

// optionalString reads an optional string argument; a present value of
// another type is rejected.
func optionalString(args map[string]any, name string) (string, error) {
	v, present := args[name]
	if !present || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", rejected("argument '%s' must be a string", name)
	}
	return s, nil
}

// timeoutArg reads timeout_seconds, defaulting to Config.DefaultTimeout.
func (f *Frontend) timeoutArg(args map[string]any) (time.Duration, error) {
	v, present := args["timeout_seconds"]
	if !present || v == nil {
		return f.cfg.DefaultTimeout, nil
	}
	secs, ok := v.(float64)
	if !ok || math.IsNaN(secs) || math.IsInf(secs, 0) {
		return 0, rejected("argument 'timeout_seconds' must be a number")
	}
	// A job's timeout travels in whole milliseconds, 0 meaning none given
	// (the default): a positive timeout under one millisecond became the
	// default minute.
	if secs < 0.001 || secs > f.cfg.MaxTimeout.Seconds() {
		return 0, rejected("timeout_seconds must be at least 0.001 (one millisecond) and at most %g", f.cfg.MaxTimeout.Seconds())
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// runOptions are the tool options shared by every tool that runs code
// (execute_code, execute_code_file): the timeout and limits parameters
// (read by runArgs), the result's schema and the annotations.
func (f *Frontend) runOptions() mcp.ToolOption {
	opts := []mcp.ToolOption{
		mcp.WithNumber("timeout_seconds", mcp.Description(fmt.Sprintf(
			"Wall-clock limit in seconds (default %g, at most %g); the whole process group is killed when it passes",
			f.cfg.DefaultTimeout.Seconds(), f.cfg.MaxTimeout.Seconds()))),
		limitsOption(),
		taskSupport(),
		gpuOption(),
		mcp.WithOutputSchema[ExecResult](),
		hints(runsCode),
	}
	return func(t *mcp.Tool) {
		for _, o := range opts {
			o(t)
		}
	}
}

// runCode runs code as a job of scope and waits for its result. It is the
// one path every tool that runs code takes (execute_code, execute_code_file),
// so they run code the same way: same environment, limits and result. The
// code's record in the session's runs history (CodeStore.RecordRun) starts
// before the job is published and ends before the call returns. filename is
// already clean; sourceFile names the code file the code came from, if any.
func (f *Frontend) runCode(ctx context.Context, scope, code, filename, sourceFile string, args runArgs) (*mcp.CallToolResult, error) {
	timeout := args.timeout
	t0 := time.Now()
	env, envID, err := f.sessionEnv(ctx, scope)
	if err != nil {
		return nil, internal("cannot read the session's environment: %v", err)
	}
	now := time.Now().UTC()
	tEnv := now
	job := &wire.Job{
		ID: newJobID(ctx), Kind: wire.KindExecute, Pool: f.cfg.Pool, Scope: scope,
		Code: code, Filename: filename, TimeoutMS: timeout.Milliseconds(),
		OutputLimit: f.cfg.OutputLimit, EnqueuedAt: now, Deadline: now.Add(timeout + f.cfg.QueueWait),
		Env: env, EnvID: envID, Limits: args.limits,
		GPU: args.gpu,
	}
	if env != nil {
		// Building the environment, if no live worker holds it, is not part
		// of the code's timeout.
		job.Deadline = job.Deadline.Add(f.cfg.InstallTimeout)
	}
	// The run's record is started before the job is published (submit) and
	// written before the call returns, whatever it returns, so a caller
	// that sees a job id can always list its run. It runs beside the
	// publish, off the latency path (a bbolt commit in codexec dev takes
	// milliseconds).
	log := f.log.With("job", job.ID, "scope", scope)
	run := codefiles.RunInfo{JobID: job.ID, Filename: filename, SourceFile: sourceFile, Size: int64(len(code)), Time: now}
	rec := newBackground(func(ctx context.Context) {
		if err := f.files.RecordRun(context.WithoutCancel(ctx), scope, run, code); err != nil {
			// The job runs regardless; its worker keeps its own copy of the script.
			log.Error("record run", "err", err)
		}
	})
	defer rec.wait()
	stopStream := f.streamOutput(ctx, job)
	defer stopStream()
	target, err := f.dispatch(ctx, job, rec.start)
	if err != nil {
		return nil, err
	}
	tDispatched := time.Now()
	res, err := f.awaitResult(ctx, job, target)
	tResult := time.Now()
	if err != nil && ctx.Err() == nil {
		log.Warn("no result", "message", err.Error())
	}
	rec.wait()
	if err != nil {
		return nil, err
	}
	tr := toolResult(res, filename)
	if log.Enabled(ctx, slog.LevelDebug) {
		// Where the frontend's part of a call goes, for operators and for
		// docs/performance.md: the session's environment (state store),
		// the dispatch (presence read, then the job's record and the
		// publish; its own debug line splits them), the wait for the
		// result (queue, worker, result store, notification), and what the
		// run record and rendering added after the result came.
		end := time.Now()
		log.Debug("call timing",
			"session_ms", ms(tEnv.Sub(t0)), "dispatch_ms", ms(tDispatched.Sub(tEnv)),
			"wait_ms", ms(tResult.Sub(tDispatched)), "record_extra_ms", ms(end.Sub(tResult)),
			"total_ms", ms(end.Sub(t0)))
	}
	return tr, nil
}

// ms is d in milliseconds with microsecond resolution, for timing fields of
// debug lines.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// getJobResult answers for a job id in one of four ways: its result; the
// job is still queued or running (status running, not an error); it expired
// (no result, and past its deadline and timeout no result can come); or no
// such job of this session. A job of another session reads exactly like an
// unknown one, so ids cannot be probed. The job's record (written before the
// job was first published, broker.PutJobRecord) tells the middle two apart
// from the last.
func (f *Frontend) getJobResult(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	id, ok := req.GetArguments()["job_id"].(string)
	switch {
	case !ok:
		return nil, rejected("missing required argument 'job_id' (a string)")
	case strings.TrimSpace(id) == "":
		return nil, rejected("argument 'job_id' is empty: give the job_id an earlier call returned (list_code_files lists the recent ones)")
	}
	if _, err := ulid.ParseStrict(id); err != nil {
		return nil, rejected("job_id %q is not a job id", id)
	}
	// A job this frontend is still trying to queue, or gave up on, may have
	// no record yet, and NATS may be down: its own account comes first
	// where it is the whole answer.
	local := f.unqueued.get(id)
	if local != nil && local.rec.Scope != scope {
		local = nil
	}
	if local != nil && local.never.Load() {
		te := failure(wire.StatusExpired, "job %s expired: it could not be queued in time, so it did not run and will not; send the code again to run it", id)
		te.JobID = id
		return nil, te
	}
	res, err := f.broker.GetResult(ctx, id)
	switch {
	case err == nil && res.Scope == scope:
		return toolResult(res, ""), nil
	case err == nil:
		return nil, unknownJob(id)
	case local != nil:
		return jobRunning(local.rec), nil
	case !errors.Is(err, wire.ErrResultNotFound):
		return nil, internal("reading the result of job %s failed: %v; try again", id, err)
	}
	rec, err := f.broker.GetJobRecord(ctx, id)
	switch {
	case errors.Is(err, broker.ErrNoJobRecord):
		return nil, unknownJob(id)
	case err != nil:
		return nil, internal("reading the record of job %s failed: %v; try again", id, err)
	case rec.Scope != scope:
		return nil, unknownJob(id)
	case time.Now().Before(settledBy(rec)):
		return jobRunning(rec), nil
	default:
		te := failure(wire.StatusExpired, "job %s expired: it has no result and its deadline (%s) has passed, so it will not run now "+
			"(had a worker started it and died, its output is lost); send the code again to run it",
			id, rec.Deadline.Format(time.RFC3339))
		te.JobID = id
		return nil, te
	}
}

// statusRunning is get_job_result's status for a job that is queued or
// running: not a failure, not a result yet.
const statusRunning wire.Status = "running"

// settleGrace is how long, past the latest time a job can still be running
// (its deadline plus its timeout), its result may take to be stored.
const settleGrace = 30 * time.Second

// settledBy is when a job without a result will never have one: no worker
// starts it past its deadline, and one that started it just before stops
// it after its timeout.
func settledBy(rec *broker.JobRecord) time.Time {
	return rec.Deadline.Add(time.Duration(rec.TimeoutMS)*time.Millisecond + settleGrace)
}

// unknownJob is get_job_result's answer for a job id that is not one of the
// session's jobs.
func unknownJob(id string) *toolError {
	return rejected("no job %s in this session: it was never submitted here, or it is older than the time results are kept", id)
}

// jobRunning renders a job that is queued or running.
func jobRunning(rec *broker.JobRecord) *mcp.CallToolResult {
	return toolResult(&wire.Result{
		JobID: rec.JobID, Status: statusRunning, ExitCode: -1,
		Message: fmt.Sprintf("job %s has not finished: it is queued or running (no worker starts it after %s); call get_job_result again later",
			rec.JobID, rec.Deadline.Format(time.RFC3339)),
	}, "")
}

// toolResult renders a job result: text a model reads at a glance (stdout,
// then stderr, then a one-line status that names the limit the job hit, if
// one did) and the same facts as structured content. isError is true exactly
// when the job failed; a job still running (get_job_result) has not.
func toolResult(r *wire.Result, filename string) *mcp.CallToolResult {
	er := ExecResult{
		JobID: r.JobID, Status: string(r.Status), ExitCode: r.ExitCode,
		Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated,
		StdoutBytes: r.StdoutBytes, StderrBytes: r.StderrBytes,
		OutputFiles: outputFilesOf(r), Pictures: picturesOf(r),
		DurationMS: r.DurationMS, WorkerID: r.WorkerID, EnvID: r.EnvID,
		Filename: filename, Signal: r.Signal, Limit: r.Limit, Message: r.Message,
		GPU: gpuResult(r.GPU),
	}
	out := mcp.NewToolResultStructured(er, execText(er, len(er.Stdout), len(er.Stderr)))
	out.IsError = r.Status.Failed() && r.Status != statusRunning
	addRichContent(out, r)
	return out
}

// execText is the text of a job result er (the first content of its tool
// result): its streams, each with a line when it was cut that says how
// many of its bytes are shown (stdoutShown, stderrShown), then its status
// line.
func execText(er ExecResult, stdoutShown, stderrShown int) string {
	var b strings.Builder
	for _, s := range []struct {
		name, text string
		cut        bool
		shown      int
		total      int64
	}{{"stdout", er.Stdout, er.StdoutTruncated, stdoutShown, er.StdoutBytes}, {"stderr", er.Stderr, er.StderrTruncated, stderrShown, er.StderrBytes}} {
		if s.text == "" {
			continue
		}
		if s.name == "stderr" {
			b.WriteString("--- stderr ---\n")
		}
		b.WriteString(s.text)
		if !strings.HasSuffix(s.text, "\n") {
			b.WriteByte('\n')
		}
		if s.cut {
			fmt.Fprintf(&b, "[... %s truncated: %d of %d bytes shown]\n", s.name, s.shown, s.total)
		}
	}
	b.WriteString(missingModuleHint(er))
	fmt.Fprintf(&b, "[%s", er.Status)
	if er.Limit != "" && !strings.Contains(er.Message, "limit") {
		// The worker's messages name the limit already ("memory limit
		// reached (256 MiB)"); say it here only when one does not.
		fmt.Fprintf(&b, ": %s limit", er.Limit)
	}
	if er.Message != "" {
		fmt.Fprintf(&b, ": %s", er.Message)
	}
	switch {
	case er.JobID != "" && er.Status == string(statusRunning):
		fmt.Fprintf(&b, " | job %s", er.JobID)
	case er.JobID != "":
		fmt.Fprintf(&b, " | %.1f ms | job %s", er.DurationMS, er.JobID)
		if er.WorkerID != "" {
			fmt.Fprintf(&b, " on %s", er.WorkerID)
		}
	case er.WorkerID != "":
		// A call in a context: it ran, and is no job.
		fmt.Fprintf(&b, " | %.1f ms on %s", er.DurationMS, er.WorkerID)
	}
	b.WriteString(er.GPU.line())
	b.WriteString("]")
	return b.String()
}
