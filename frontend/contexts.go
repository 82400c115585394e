package frontend

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// The context tools: create_context, run_in_context, list_contexts,
// reset_context and close_context (docs/contexts.md). A context is a live
// interpreter of the session on one worker (worker/contexts.go) that keeps
// its variables between calls. Its record in the state store
// (Keys.Contexts(scope), a hash of the session's contexts) names the worker
// that holds it; each call goes there as a NATS request (wire.ContextSubject).
// The record is under the session's scope, so another session's call reads
// no record and gets exactly the answer for a context that never existed.
// When the worker is gone, or no longer has the context, the call says the
// context and its variables were lost and the record goes: a context is
// never silently replaced by an empty one.

// maxSessionContexts is how many contexts one session may hold at once, so
// that one session cannot take every worker's contexts from the others.
const maxSessionContexts = 8

// maxContextCode bounds a run_in_context call's code: it travels in one
// NATS message. Longer code runs with execute_code, or from a code file.
const maxContextCode = 512 << 10

// contextAnswerSlack is how long past a call's own time (its timeout and
// the interrupt's grace) a frontend waits for the worker's answer.
const contextAnswerSlack = 30 * time.Second

// statusLost is the status of a call to a context that is gone with its
// worker, or ended since its last call.
const statusLost wire.Status = "lost"

// ContextResult is the structured content of create_context, reset_context
// and close_context.
type ContextResult struct {
	Status     string  `json:"status" jsonschema_description:"ok, or why not: rejected, limit, lost, internal"`
	ContextID  string  `json:"context_id" jsonschema_description:"the context's name in this session; run_in_context takes it"`
	WorkerID   string  `json:"worker_id,omitempty"`
	EnvID      string  `json:"env_id,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	Message    string  `json:"message"`
}

// ContextEntry is one context of list_contexts.
type ContextEntry struct {
	ContextID string    `json:"context_id"`
	WorkerID  string    `json:"worker_id"`
	EnvID     string    `json:"env_id"`
	CreatedAt time.Time `json:"created_at"`
	State     string    `json:"state" jsonschema_description:"live, or lost: its worker is gone, or it ended (ended says why); its next call says so and forgets it"`
	Ended     string    `json:"ended,omitempty"`
}

// ContextList is the structured content of list_contexts.
type ContextList struct {
	Status   string         `json:"status"`
	Contexts []ContextEntry `json:"contexts"`
	Message  string         `json:"message"`
}

func (f *Frontend) registerContextTools(s *server.MCPServer, stdio bool) {
	idArg := mcp.WithString("context_id", mcp.Required(), mcp.Description("The context's name, as create_context returned it"))
	s.AddTool(mcp.NewTool("create_context",
		mcp.WithDescription("Start a context: a live Python interpreter of this session, in its environment and working directory, "+
			"that keeps variables, imports and open objects between run_in_context calls (like a notebook's kernel). "+
			"Forked from a warm interpreter, sandboxed and limited as execute_code is (limits apply for the context's life). "+
			fmt.Sprintf("A session holds at most %d; idle contexts end after a while, and the list_contexts tool lists them.", maxSessionContexts)),
		mcp.WithString("name", mcp.Description("Its name: lower-case letters, digits, '-' and '_' (default: a generated one)")),
		limitsOption(),
		mcp.WithOutputSchema[ContextResult](),
		hints(0),
	), handler(stdio, f.createContext, contextFailure))

	s.AddTool(mcp.NewTool("run_in_context",
		mcp.WithDescription("Run Python code in a context made by create_context: its variables stay for the next call. "+
			"The value of a last bare expression is shown (as in a notebook); print and exceptions as in a script. "+
			"On timeout the code gets KeyboardInterrupt and the context survives; code that ignores it is killed, and the context with it. "+
			"Returns what execute_code returns."),
		idArg,
		mcp.WithString("code", mcp.Required(), mcp.Description("Python source to run")),
		mcp.WithNumber("timeout_seconds", mcp.Description(fmt.Sprintf(
			"Wall-clock limit in seconds (default %g, at most %g); then KeyboardInterrupt stops the code",
			f.cfg.DefaultTimeout.Seconds(), f.cfg.MaxTimeout.Seconds()))),
		mcp.WithOutputSchema[ExecResult](),
		hints(runsCode),
	), handler(stdio, f.runInContext, execFailure))

	s.AddTool(mcp.NewTool("list_contexts",
		mcp.WithDescription("List this session's contexts: name, worker, environment, creation time, and whether each is live or lost."),
		mcp.WithOutputSchema[ContextList](),
		hints(readOnly),
	), handler(stdio, f.listContexts, contextListFailure))

	s.AddTool(mcp.NewTool("reset_context",
		mcp.WithDescription("Replace a context's interpreter by a fresh one (same name, environment and limits): every variable is gone."),
		idArg,
		mcp.WithOutputSchema[ContextResult](),
		hints(destructive|idempotent),
	), handler(stdio, f.resetContext, contextFailure))

	s.AddTool(mcp.NewTool("close_context",
		mcp.WithDescription("End a context and free what it holds. Its files in the working directory stay."),
		idArg,
		mcp.WithOutputSchema[ContextResult](),
		hints(destructive|idempotent),
	), handler(stdio, f.closeContext, contextFailure))
}

func (f *Frontend) createContext(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	name, err := optionalString(args, "name")
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = "ctx-" + strings.ToLower(rand.Text()[:8])
	} else if !wire.ValidContextID(name) {
		return nil, rejected("name %q is not a context name: 1 to 64 lower-case letters, digits, '-' and '_', starting with a letter or digit", name)
	}
	lim, err := limitsArg(args)
	if err != nil {
		return nil, err
	}
	key := f.cfg.Keys.Contexts(scope)
	all, err := f.store.HGetAll(ctx, key)
	if err != nil {
		return nil, internal("cannot read the session's contexts: %v", err)
	}
	if _, ok := all[name]; ok {
		return nil, rejected("this session has a context named %s already: run code in it, or reset_context or close_context it", name)
	}
	if len(all) >= maxSessionContexts {
		return nil, failure(wire.StatusLimit, "this session holds %d contexts, the most it may: close_context one first (list_contexts lists them)", len(all))
	}
	env, envID, err := f.sessionEnv(ctx, scope)
	if err != nil {
		return nil, internal("cannot read the session's environment: %v", err)
	}
	creq := &wire.ContextRequest{Op: wire.ContextCreate, ID: name, Scope: scope, Env: env, EnvID: envID, Limits: lim,
		Deadline: time.Now().Add(f.cfg.InstallTimeout + f.cfg.QueueWait).UTC()}
	var (
		worker string
		reply  *wire.ContextReply
		gone   []string
	)
	for {
		// A worker that died moments ago is still in the presence records
		// for a few seconds: the next one is asked.
		if worker, err = f.contextWorker(ctx, scope, env, envID, gone); err != nil {
			return nil, err
		}
		reply, err = f.askContext(ctx, worker, creq, time.Until(creq.Deadline)+contextAnswerSlack)
		if !errors.Is(err, errContextWorkerGone) || len(gone) >= 3 {
			break
		}
		gone = append(gone, worker)
	}
	if errors.Is(err, errContextWorkerGone) {
		return nil, internal("no worker answered (tried %s): try again", strings.Join(gone, ", "))
	}
	if err != nil {
		return nil, err
	}
	res := reply.Result
	if res.Status != wire.StatusOK {
		return nil, &toolError{Status: res.Status, Message: res.Message, WorkerID: worker}
	}
	rec, _ := json.Marshal(wire.ContextRecord{V: wire.Version, Worker: worker, EnvID: res.EnvID, CreatedAt: time.Now().UTC()})
	if err := f.store.HSet(ctx, key, name, rec); err != nil {
		// Unrecorded, it could never be reached: end it.
		_, _ = f.askContext(context.WithoutCancel(ctx), worker, &wire.ContextRequest{Op: wire.ContextClose, ID: name, Scope: scope}, contextAnswerSlack)
		return nil, internal("the context could not be recorded (%v): it was closed; try again", err)
	}
	return contextResult(ContextResult{Status: string(wire.StatusOK), ContextID: name, WorkerID: worker, EnvID: res.EnvID,
		DurationMS: res.DurationMS, Message: res.Message}), nil
}

// contextWorker chooses the worker of a new context: the session's
// workspace holder when it can run the environment (its files are there),
// else the worker placement chooses for the environment, else the least
// loaded.
func (f *Frontend) contextWorker(ctx context.Context, scope string, env *envspec.Spec, envID string, gone []string) (string, error) {
	adverts, err := f.pool(ctx)
	if err == nil && len(adverts) == 0 {
		adverts, err = f.awaitAnnounce(ctx)
	}
	if err != nil {
		return "", internal("%v", err)
	}
	adverts = slices.DeleteFunc(slices.Clone(adverts), func(a envspec.Advert) bool { return slices.Contains(gone, a.WorkerID) })
	if len(adverts) == 0 {
		return "", internal("no live worker of pool %q answered: try again", f.cfg.Pool)
	}
	if len(adverts) == 0 {
		return "", internal("no worker of pool %q is known to be alive (the state store was unreachable): try again", f.cfg.Pool)
	}
	w := f.workspaceHolder(ctx, &wire.Job{Kind: wire.KindExecute, Scope: scope, Env: env, EnvID: envID}, adverts, true)
	if w != "" && slices.ContainsFunc(adverts, func(a envspec.Advert) bool { return a.WorkerID == w }) {
		return w, nil
	}
	if env != nil {
		chosen, _, err := envspec.Choose(adverts, *env, envID)
		if err != nil {
			return "", rejected("environment %s cannot run in pool %q: %v", envID, f.cfg.Pool, err)
		}
		return chosen, nil
	}
	best := slices.MinFunc(adverts, func(a, b envspec.Advert) int { return a.Load - b.Load })
	return best.WorkerID, nil
}

func (f *Frontend) runInContext(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	id, err := contextIDArg(args)
	if err != nil {
		return nil, err
	}
	code, ok := args["code"].(string)
	switch {
	case !ok:
		return nil, rejected("missing required argument 'code' (a string of Python source)")
	case strings.TrimSpace(code) == "":
		return nil, rejected("argument 'code' is empty: nothing to run")
	case len(code) > min(maxContextCode, f.cfg.MaxCodeBytes):
		return nil, rejected("code is %d bytes; a context takes at most %d bytes per call (run longer code with execute_code, or write it to a file first)",
			len(code), min(maxContextCode, f.cfg.MaxCodeBytes))
	}
	timeout, err := f.timeoutArg(args)
	if err != nil {
		return nil, err
	}
	rec, err := f.contextRecord(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if err := f.admitWorkdirBytes(ctx, &wire.Job{Kind: wire.KindExecute, Tenant: callerTenant(ctx)}); err != nil {
		return nil, err
	}
	release, err := f.admitContextCall(ctx, timeout)
	if err != nil {
		return nil, err
	}
	defer release()
	// The deadline is when this call stops waiting: the worker starts no
	// run that could not answer by then (one that waited behind another
	// call of the context, or on a worker stopped or cut off meanwhile),
	// since this call will have said that no answer came. Call names the
	// run, so that an interrupt stops this one and no other.
	wait := timeout + contextAnswerSlack
	creq := &wire.ContextRequest{Op: wire.ContextRun, ID: id, Scope: scope, Code: code,
		TimeoutMS: timeout.Milliseconds(), OutputLimit: f.cfg.OutputLimit,
		Deadline: time.Now().Add(wait).UTC(), Call: ulid.Make().String()}
	reply, err := f.askHolder(ctx, rec, creq, wait)
	if err != nil {
		if ctx.Err() != nil {
			// The caller went away (cancelled, or its HTTP request closed):
			// stop the code, as its timeout would.
			f.interruptContext(ctx, rec.Worker, scope, id, creq.Call)
		}
		return nil, err
	}
	if reply.Ended != "" {
		f.forgetContext(ctx, scope, id)
	}
	// The call is no job of the results store: get_job_result and
	// read_code_file know no id of it, so its result names none (the id
	// the worker gave its answer is its own).
	res := *reply.Result
	res.JobID = ""
	return toolResult(&res, ""), nil
}

// interruptContext asks the context's worker to stop call, the run of it
// whose caller went away, whether it runs now or waits to.
func (f *Frontend) interruptContext(ctx context.Context, worker, scope, id, call string) {
	req := &wire.ContextRequest{Op: wire.ContextInterrupt, ID: id, Scope: scope, Call: call}
	if _, err := f.askContext(context.WithoutCancel(ctx), worker, req, 5*time.Second); err != nil {
		f.log.Warn("interrupt a context's call", "context", id, "scope", scope, "err", err)
	}
}

func (f *Frontend) resetContext(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	return f.contextOp(ctx, req, scope, wire.ContextReset)
}

func (f *Frontend) closeContext(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	return f.contextOp(ctx, req, scope, wire.ContextClose)
}

// contextOp resets or closes a context.
func (f *Frontend) contextOp(ctx context.Context, req mcp.CallToolRequest, scope string, op wire.ContextOp) (*mcp.CallToolResult, error) {
	id, err := contextIDArg(req.GetArguments())
	if err != nil {
		return nil, err
	}
	rec, err := f.contextRecord(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	creq := &wire.ContextRequest{Op: op, ID: id, Scope: scope, Deadline: time.Now().Add(f.cfg.QueueWait).UTC()}
	reply, err := f.askHolder(ctx, rec, creq, f.cfg.QueueWait+contextAnswerSlack)
	if err != nil {
		return nil, err
	}
	res := reply.Result
	if op == wire.ContextClose || res.Status != wire.StatusOK {
		f.forgetContext(ctx, scope, id)
	}
	if res.Status != wire.StatusOK {
		return nil, &toolError{Status: res.Status, Message: res.Message, WorkerID: rec.Worker}
	}
	return contextResult(ContextResult{Status: string(wire.StatusOK), ContextID: id, WorkerID: rec.Worker, EnvID: res.EnvID,
		DurationMS: res.DurationMS, Message: res.Message}), nil
}

func (f *Frontend) listContexts(ctx context.Context, _ mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	all, err := f.store.HGetAll(ctx, f.cfg.Keys.Contexts(scope))
	if err != nil {
		return nil, internal("cannot read the session's contexts: %v", err)
	}
	adverts, _ := f.pool(ctx)
	out := ContextList{Status: string(wire.StatusOK), Contexts: []ContextEntry{}}
	for id, data := range all {
		var rec wire.ContextRecord
		if json.Unmarshal(data, &rec) != nil {
			continue
		}
		e := ContextEntry{ContextID: id, WorkerID: rec.Worker, EnvID: rec.EnvID, CreatedAt: rec.CreatedAt, State: "live", Ended: rec.Ended}
		alive := slices.ContainsFunc(adverts, func(a envspec.Advert) bool { return a.WorkerID == rec.Worker })
		if rec.Ended != "" || !alive {
			e.State = "lost"
		}
		out.Contexts = append(out.Contexts, e)
	}
	slices.SortFunc(out.Contexts, func(a, b ContextEntry) int { return a.CreatedAt.Compare(b.CreatedAt) })
	var b strings.Builder
	for _, e := range out.Contexts {
		fmt.Fprintf(&b, "%s: %s on %s, environment %s, created %s\n", e.ContextID, e.State, e.WorkerID, e.EnvID, e.CreatedAt.Format(time.RFC3339))
	}
	out.Message = fmt.Sprintf("%d context(s)", len(out.Contexts))
	b.WriteString("[" + out.Message + "]")
	return mcp.NewToolResultStructured(out, b.String()), nil
}

// contextIDArg reads the context_id argument.
func contextIDArg(args map[string]any) (string, error) {
	id, ok := args["context_id"].(string)
	if !ok || id == "" {
		return "", rejected("missing required argument 'context_id' (a string, as create_context returned it)")
	}
	return id, nil
}

// contextRecord reads the record of context id of scope. A name that is not
// a context's, or none of this session's, is unknownContext; a context that
// ended since its last call is lost (and forgotten).
func (f *Frontend) contextRecord(ctx context.Context, scope, id string) (wire.ContextRecord, error) {
	var rec wire.ContextRecord
	if !wire.ValidContextID(id) {
		return rec, unknownContext(id)
	}
	data, err := f.store.HGet(ctx, f.cfg.Keys.Contexts(scope), id)
	if errors.Is(err, statestore.ErrNotFound) {
		return rec, unknownContext(id)
	}
	if err != nil {
		return rec, internal("cannot read the context's record: %v; try again", err)
	}
	if err := json.Unmarshal(data, &rec); err != nil || rec.Worker == "" {
		return rec, internal("the context's record is unreadable: %v", err)
	}
	if rec.Ended != "" {
		return rec, f.lost(ctx, scope, id, "it ended: "+rec.Ended)
	}
	return rec, nil
}

// askHolder sends req to the worker of rec. A worker that is gone, or no
// longer has the context, makes the context lost.
func (f *Frontend) askHolder(ctx context.Context, rec wire.ContextRecord, req *wire.ContextRequest, wait time.Duration) (*wire.ContextReply, error) {
	reply, err := f.askContext(ctx, rec.Worker, req, wait)
	switch {
	case errors.Is(err, errContextWorkerGone):
		return nil, f.lost(ctx, req.Scope, req.ID, fmt.Sprintf("worker %s, which held it, is gone (it stopped or died)", rec.Worker))
	case err != nil:
		return nil, err
	case reply.Unknown:
		return nil, f.lost(ctx, req.Scope, req.ID, fmt.Sprintf("worker %s, which held it, no longer has it (it restarted)", rec.Worker))
	case reply.EndedBefore:
		return nil, f.lost(ctx, req.Scope, req.ID, "it ended: "+reply.Ended)
	}
	return reply, nil
}

// errContextWorkerGone says the worker a context request went to is gone.
var errContextWorkerGone = errors.New("the context's worker is gone")

// askContext sends req to worker and waits up to wait for its answer.
func (f *Frontend) askContext(ctx context.Context, worker string, req *wire.ContextRequest, wait time.Duration) (*wire.ContextReply, error) {
	req.V = wire.Version
	withTenantContext(ctx, req)
	data, err := json.Marshal(req)
	if err != nil {
		return nil, internal("%v", err)
	}
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	out, err := f.broker.RequestContext(rctx, f.cfg.Pool, worker, data)
	switch {
	case errors.Is(err, broker.ErrNoResponder):
		return nil, errContextWorkerGone
	case err != nil && ctx.Err() != nil:
		return nil, internal("the call ended before the context answered")
	case err != nil:
		if adverts, live, perr := f.presenceOf(ctx); perr == nil && live &&
			!slices.ContainsFunc(adverts, func(a envspec.Advert) bool { return a.WorkerID == worker }) {
			return nil, errContextWorkerGone
		}
		return nil, internal("worker %s did not answer within %s: %v; try again", worker, wait.Round(time.Second), err)
	}
	var reply wire.ContextReply
	if err := json.Unmarshal(out, &reply); err != nil || reply.Result == nil {
		return nil, internal("undecodable answer from worker %s", worker)
	}
	return &reply, nil
}

// lost forgets context id of scope and returns the failure that says it
// was lost, and why.
func (f *Frontend) lost(ctx context.Context, scope, id, why string) *toolError {
	f.forgetContext(ctx, scope, id)
	return failure(statusLost, "context %s was lost: %s. Its variables, imports and objects are gone; "+
		"create a new context with create_context and run again what built them (files it wrote to the working directory remain)", id, why)
}

func (f *Frontend) forgetContext(ctx context.Context, scope, id string) {
	if err := f.store.HDel(context.WithoutCancel(ctx), f.cfg.Keys.Contexts(scope), id); err != nil {
		f.log.Warn("forget a context", "context", id, "scope", scope, "err", err)
	}
}

// unknownContext is the answer for a name that is none of the session's
// contexts: the same whether another session has a context of that name or
// not.
func unknownContext(id string) *toolError {
	return rejected("unknown context %q: this session has no context of that name (list_contexts lists them; create_context makes one)", id)
}

// withTenantContext sets req's tenant and principal as withTenant sets a
// job's.
func withTenantContext(ctx context.Context, req *wire.ContextRequest) {
	job := &wire.Job{Tenant: req.Tenant, Principal: req.Principal}
	withTenant(ctx, job)
	req.Tenant, req.Principal = job.Tenant, job.Principal
}

func contextResult(r ContextResult) *mcp.CallToolResult {
	text := "[" + r.Status + ": " + r.Message
	if r.DurationMS > 0 {
		text += fmt.Sprintf(" | %.1f ms", r.DurationMS)
	}
	out := mcp.NewToolResultStructured(r, text+"]")
	out.IsError = r.Status != string(wire.StatusOK)
	return out
}

// contextFailure renders a failure of create_context, reset_context or
// close_context.
func contextFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	return contextResult(ContextResult{Status: string(te.Status), WorkerID: te.WorkerID, Message: te.Message})
}

// contextListFailure renders a failure of list_contexts.
func contextListFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	out := mcp.NewToolResultStructured(ContextList{Status: string(te.Status), Contexts: []ContextEntry{}, Message: te.Message},
		statusLine(string(te.Status), te.Message))
	out.IsError = true
	return out
}
