package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// MCP tasks (the tasks utility of protocol revision 2025-11-25): a client
// that declares a task in a tools/call of a tool that supports tasks gets
// a task at once; the tool runs in the background, and tasks/get,
// tasks/result, tasks/list and tasks/cancel answer for it. Clients that
// send no task get the blocking call, as before.
//
// mcp-go implements tasks in one process's memory, which no other frontend
// of a cluster can read, and runs a task under the context of the request
// that created it. So codexec answers these methods itself, before mcp-go
// sees them (taskRouter, in front of the HTTP handler and of the stdio
// server), and keeps each task in the results bucket (broker/tasks.go):
// its record when it is created, its outcome when it is over, its cancel
// mark when cancelled. Any frontend answers for any task; the key carries
// the scope, so a task is only ever found under the scope that created it.
//
// The tool runs on the frontend that created the task (runTask), its
// context that of the task, not of the request: cancelled by tasks/cancel
// (from any frontend: the cancel mark reaches it as a message), never by
// the request's end. A tool that runs code runs it as a job whose id is
// the task's id, so the cancel mark stops the job on its worker directly,
// and should the frontend die, the job's own result answers for the task.

// taskPollMS is the polling interval a task suggests to its client.
const taskPollMS = 1000

// taskListPage is how many tasks one tasks/list page holds.
const taskListPage = 100

// maxRunningTasks bounds the tasks running on one frontend at once: each
// holds its arguments (up to the largest code a call may send) until it
// ends. Their arguments together are bounded by Config.RequestBudget,
// as the bodies of the requests being handled are.
const maxRunningTasks = 256

// maxCallerTasks bounds the tasks one identified caller (an authenticated
// identity, or the Authorization header a proxy in front sets: see
// maxCallerRequests) has running on a frontend at once, and its tasks'
// arguments take at most a quarter of Config.RequestBudget (its first task
// whatever its size). A task outlives its request, so the bound on a
// caller's requests in progress does not hold its tasks: one tenant once
// created 256 tasks that waited for their jobs, and every other tenant's
// task was refused for as long as they ran (up to the longest timeout).
// Four callers are now needed to take every task of a frontend. Callers
// that nothing identifies are bounded only by the frontend's total, as
// their requests are.
const maxCallerTasks = maxRunningTasks / 4

// taskSlots counts the tasks running on a frontend and their arguments, in
// all and per identified caller.
type taskSlots struct {
	mu     sync.Mutex
	n      int
	bytes  int64
	caller map[string]*callerTasks
}

// callerTasks is one caller's share of taskSlots.
type callerTasks struct {
	n     int
	bytes int64
}

// take admits one more task of size bytes of arguments for caller ("":
// unidentified), within budget bytes in all (one task is admitted whatever
// its size, as one request of the largest size is) and the caller's share
// of both. ownLimit tells a refusal for the caller's share.
func (s *taskSlots) take(caller string, size, budget int64) (ok, ownLimit bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= maxRunningTasks || (s.n > 0 && s.bytes+size > budget) {
		return false, false
	}
	if caller != "" {
		c := s.caller[caller]
		if c != nil && (c.n >= maxCallerTasks || c.bytes+size > budget/4) {
			return false, true
		}
		if c == nil {
			if s.caller == nil {
				s.caller = map[string]*callerTasks{}
			}
			c = &callerTasks{}
			s.caller[caller] = c
		}
		c.n++
		c.bytes += size
	}
	s.n++
	s.bytes += size
	return true, false
}

func (s *taskSlots) give(caller string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n--
	s.bytes -= size
	if c := s.caller[caller]; c != nil {
		c.n--
		c.bytes -= size
		if c.n <= 0 {
			delete(s.caller, caller)
		}
	}
}

// taskCaller is who a task of ctx belongs to for maxCallerTasks: its
// identity, else its Authorization header (httpContext), else "".
func taskCaller(ctx context.Context) string {
	if who, ok := ctx.Value(identityKey{}).(string); ok {
		return who
	}
	if p, ok := ctx.Value(principalKey{}).(string); ok {
		return p
	}
	return ""
}

// taskTools are the tools a client may call as tasks: those that run code
// or build environments. jobIsTask says the tool's job has the task's id.
var taskTools = map[string]struct{ jobIsTask bool }{
	"execute_code":          {jobIsTask: true},
	"execute_code_file":     {jobIsTask: true},
	"install_dependencies":  {},
	"configure_environment": {},
}

// taskSupport marks a tool as callable as a task (tools/list shows
// execution.taskSupport "optional").
func taskSupport() mcp.ToolOption { return mcp.WithTaskSupport(mcp.TaskSupportOptional) }

type (
	taskScopeKey struct{}
	taskJobKey   struct{}
)

// newJobID is the id of a job a tool submits: the task's id when the tool
// runs as a task whose job is the task, else a new ULID.
func newJobID(ctx context.Context) string {
	if id, ok := ctx.Value(taskJobKey{}).(string); ok {
		return id
	}
	return ulid.Make().String()
}

// errTaskCancelled is the cause of a task's context ended by tasks/cancel.
var errTaskCancelled = errors.New("frontend: the task was cancelled")

// taskOutcome is what the results bucket keeps of a task that is over:
// its status and the tool's result, or, for a result too large for one
// message, the job whose result it renders.
type taskOutcome struct {
	Status   mcp.TaskStatus  `json:"status"`
	Message  string          `json:"message,omitempty"`
	Result   json.RawMessage `json:"result,omitempty"`
	JobID    string          `json:"job_id,omitempty"`
	Filename string          `json:"filename,omitempty"`
	// Ended is when the task ended, its lastUpdatedAt from then on.
	Ended time.Time `json:"ended,omitzero"`
}

// taskRouter answers the task methods and task-augmented tool calls of one
// MCP server, and resources/read of its workspace files (readResource),
// and passes everything else on.
type taskRouter struct {
	f     *Frontend
	srv   *server.MCPServer
	stdio bool
}

// taskTool is handler wrapped as MCPServer's tool middlewares wrap a call
// (mcp-go applies them to the calls it serves, not to a handler taken with
// GetTool): a panic recovered, and the links of a call in another
// workspace naming it. The `workspace` argument is resolved before the
// task starts (createTask); keepThroughDrain is a call's: a task's context
// never ends with its request (runTask).
func taskTool(handler server.ToolHandlerFunc) server.ToolHandlerFunc {
	return recoverTool(linkWorkspace(handler))
}

// recoverTool turns a panic of a task's tool into its error, as
// server.WithRecovery does for a call: a task runs on a goroutine of its
// own, where a panic would end the process.
func recoverTool(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if r := recover(); r != nil {
				res, err = nil, fmt.Errorf("panic recovered in %s tool handler: %v", req.Params.Name, r)
			}
		}()
		return next(ctx, req)
	}
}

// rpcMessage is the part of a JSON-RPC message the router reads.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// mayConcernTasks is a cheap first look at a message (which may carry
// megabytes of code): only one that may name a task method, a task
// parameter or resources/read (readResource) is decoded. It must see every
// spelling that mcp-go, decoding the message with encoding/json, reads as
// one of them: a key in any case and any of Unicode's folds ("taſk", with a
// long s, or a Kelvin sign for the k), and any escaped form ("t\u0061sk",
// "tasks\/get"). Until 2026-12-05 it looked for `"task"` and `"tasks/`
// only, and mcp-go ran a call spelled otherwise as a task of its own: kept
// in its memory for good, outside every bound on tasks, its job cancelled
// with the request (one client grew a frontend by 550 MiB in 11 s).
func mayConcernTasks(msg []byte) bool {
	return containsFoldASCII(msg, "task") || bytes.Contains(msg, []byte(`resources/read`)) ||
		bytes.Contains(msg, []byte(`\u`)) || bytes.Contains(msg, []byte(`\/`)) || !isASCII(msg)
}

// namesTaskOrRead decodes of msg (which mayConcernTasks let through, and
// which may carry megabytes of code) what tells whether it is the router's:
// its method, and for a tools/call its task parameter, without copying its
// arguments as a full decode would.
func namesTaskOrRead(msg []byte) bool {
	var head struct {
		Method string `json:"method"`
		Params struct {
			Task json.RawMessage `json:"task"`
		} `json:"params"`
	}
	if json.Unmarshal(msg, &head) != nil {
		return false // mcp-go refuses it
	}
	switch head.Method {
	case string(mcp.MethodToolsCall):
		return len(head.Params.Task) > 0 && string(head.Params.Task) != "null"
	case string(mcp.MethodTasksGet), string(mcp.MethodTasksResult), string(mcp.MethodTasksCancel), string(mcp.MethodTasksList),
		string(mcp.MethodResourcesRead):
		return true
	}
	return false
}

// containsFoldASCII reports whether msg holds word (lower-case ASCII) in any
// mix of ASCII cases.
func containsFoldASCII(msg []byte, word string) bool {
	for i := 0; i+len(word) <= len(msg); i++ {
		j := 0
		for j < len(word) && msg[i+j]|0x20 == word[j] {
			j++
		}
		if j == len(word) {
			return true
		}
	}
	return false
}

// isASCII reports whether msg is all ASCII.
func isASCII(msg []byte) bool {
	for _, c := range msg {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// batchRefused answers a JSON-RPC batch, an array of messages: revision
// 2025-03-26 allowed them, later revisions do not, and mcp-go reads none
// (it called one invalid JSON).
var batchRefused = &rpcError{Code: mcp.INVALID_REQUEST,
	Message: "JSON-RPC batches (an array of messages) are not supported: send each message on its own"}

// isBatch reports whether msg is a JSON array.
func isBatch(msg []byte) bool {
	t := bytes.TrimLeft(msg, " \t\r\n")
	return len(t) > 0 && t[0] == '['
}

// take decides whether msg is the router's to answer: when it is, answer
// computes the JSON-RPC response (it may wait, for tasks/result) and the
// HTTP status to send it with; when it is not, msg is to be passed on.
// scope is the caller's.
func (r *taskRouter) take(ctx context.Context, msg []byte, scope string) (answer func() (resp []byte, status int), ok bool) {
	if isBatch(msg) {
		return func() ([]byte, int) {
			return encodeResponse(json.RawMessage("null"), nil, batchRefused), http.StatusBadRequest
		}, true
	}
	if !mayConcernTasks(msg) || !namesTaskOrRead(msg) {
		return nil, false
	}
	var m rpcMessage
	if err := json.Unmarshal(msg, &m); err != nil || len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, false
	}
	modern, malformed := modernRequest(ctx, m)
	if malformed {
		return nil, false // mcp-go refuses it, as it should be refused
	}
	if modern {
		// resourceNotFoundCode reads the revision here; over stdio there is
		// no header to name it.
		ctx = context.WithValue(ctx, protocolHeaderKey{}, mcp.ProtocolVersion20260728)
	}
	var work func() (any, *rpcError)
	switch m.Method {
	case string(mcp.MethodToolsCall):
		var p mcp.CallToolParams
		if err := json.Unmarshal(m.Params, &p); err != nil || p.Task == nil {
			return nil, false
		}
		if _, ok := taskTools[p.Name]; !ok {
			if r.srv == nil || r.srv.GetTool(p.Name) == nil {
				return nil, false // mcp-go says there is no such tool
			}
			// A tool whose execution.taskSupport is absent (forbidden):
			// the revision says to refuse the call with -32601. Run as a
			// plain call, its answer would be a tool result where the
			// client waits for a task, which it cannot read.
			work = func() (any, *rpcError) {
				return nil, &rpcError{Code: mcp.METHOD_NOT_FOUND, Message: fmt.Sprintf(
					"tool %s cannot be called as a task (tools/list shows no execution.taskSupport for it): call it without \"task\"", p.Name)}
			}
			break
		}
		work = func() (any, *rpcError) { return r.createTask(ctx, scope, p) }
	case string(mcp.MethodTasksGet), string(mcp.MethodTasksResult), string(mcp.MethodTasksCancel):
		var p struct {
			TaskID string `json:"taskId"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil || p.TaskID == "" {
			work = func() (any, *rpcError) { return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "missing taskId"} }
			break
		}
		work = func() (any, *rpcError) {
			switch m.Method {
			case string(mcp.MethodTasksGet):
				return r.getTask(ctx, scope, p.TaskID)
			case string(mcp.MethodTasksResult):
				return r.taskResult(ctx, scope, p.TaskID)
			}
			return r.cancelTask(ctx, scope, p.TaskID)
		}
	case string(mcp.MethodTasksList):
		var p struct {
			Cursor string `json:"cursor"`
		}
		if len(m.Params) > 0 && string(m.Params) != "null" {
			if err := json.Unmarshal(m.Params, &p); err != nil {
				work = func() (any, *rpcError) {
					return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "tasks/list: params must be an object with a string cursor"}
				}
				break
			}
		}
		if !validTaskCursor(p.Cursor) {
			work = func() (any, *rpcError) {
				return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: "tasks/list: invalid cursor: pass the nextCursor of an earlier tasks/list, or none for the first page"}
			}
			break
		}
		work = func() (any, *rpcError) { return r.listTasks(ctx, scope, p.Cursor) }
	case string(mcp.MethodResourcesRead):
		var p struct {
			URI string `json:"uri"`
		}
		if err := json.Unmarshal(m.Params, &p); err != nil || !strings.HasPrefix(p.URI, workspaceURIPrefix) {
			return nil, false // mcp-go says there is no such resource
		}
		work = func() (any, *rpcError) { return r.readResource(ctx, scope, p.URI) }
	default:
		return nil, false
	}
	return func() ([]byte, int) {
		result, rerr := work()
		if modern && result != nil {
			result = r.decorateModern(result, m.Method)
		}
		status := http.StatusOK
		if modern && rerr != nil {
			status = modernErrorStatus(rerr.Code)
		}
		return encodeResponse(m.ID, result, rerr), status
	}, true
}

// modernErrorStatus is the HTTP status revision 2026-07-28 gives a JSON-RPC
// error of code, as mcp-go sends it with the errors it answers, so that
// what stands between client and server can tell a failure without reading
// the body. Earlier revisions answer every message with 200.
func modernErrorStatus(code int) int {
	switch code {
	case mcp.METHOD_NOT_FOUND:
		return http.StatusNotFound
	case mcp.HEADER_MISMATCH, mcp.MISSING_REQUIRED_CLIENT_CAPABILITY, mcp.UNSUPPORTED_PROTOCOL_VERSION,
		mcp.INVALID_REQUEST, mcp.INVALID_PARAMS, mcp.PARSE_ERROR:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// modernRequest reports whether a request is of protocol revision
// 2026-07-28 or later, by the revision its _meta (or, over HTTP, its
// Mcp-Protocol-Version header) names, as mcp-go tells them; and whether
// mcp-go refuses it as malformed before serving it: a revision it does
// not know, no client capabilities in _meta, or over HTTP a header that
// does not match the body (Mcp-Protocol-Version, Mcp-Method, Mcp-Name) or
// a Last-Event-ID. Such a request is left to mcp-go, which answers it with
// the revision's error, so that the requests the router answers are
// refused exactly as the others are (a client of a revision not yet
// written was served tasks and files, where tools/list said the revision
// is not supported).
func modernRequest(ctx context.Context, m rpcMessage) (modern, malformed bool) {
	var p struct {
		Meta *mcp.Meta `json:"_meta"`
	}
	_ = json.Unmarshal(m.Params, &p)
	version := p.Meta.ProtocolVersion()
	header, _ := ctx.Value(requestHeaderKey{}).(http.Header)
	headerVersion := header.Get(mcp.HeaderProtocolVersion)
	if !mcp.IsModernProtocol(version) && !mcp.IsModernProtocol(headerVersion) {
		return false, false
	}
	switch {
	case !mcp.IsValidProtocolVersion(version), p.Meta.ClientCapabilities() == nil:
		return true, true
	case header == nil: // stdio: no headers to check
		return true, false
	case headerVersion != version, header.Get(mcp.HeaderLastEventID) != "":
		return true, true
	}
	return true, mcp.ValidateStandardHeaders(header.Get, version, mcp.MCPMethod(m.Method), m.Params) != nil
}

// requestHeaderKey holds, in the context the router is given for an HTTP
// request, the request's headers.
type requestHeaderKey struct{}

// decorateModern gives result what revision 2026-07-28 asks of every
// result, as mcp-go gives the results it answers (and not those the router
// answers in front of it): resultType "complete", the server's name in
// _meta, and on a resources/read the cache hints, here "do not reuse"
// (ttlMs 0, private: a workspace file changes with every job).
func (r *taskRouter) decorateModern(result any, method string) any {
	v := reflect.ValueOf(result)
	p := v
	if v.Kind() != reflect.Pointer {
		p = reflect.New(v.Type())
		p.Elem().Set(v)
	} else if v.IsNil() {
		return result
	}
	md, ok := p.Interface().(mcp.ResultMetadata)
	if !ok {
		return result
	}
	if md.GetResultType() == "" {
		md.SetResultType(mcp.ResultTypeComplete)
	}
	if meta := md.EnsureResultMeta(); meta.ServerInfo() == nil {
		meta.SetServerInfo(mcp.Implementation{Name: serverName, Version: r.f.cfg.Version})
	}
	if ch, ok := p.Interface().(mcp.CacheHintSetter); ok && method == string(mcp.MethodResourcesRead) {
		ch.SetCacheHints(0, mcp.CacheScopePrivate)
	}
	if v.Kind() != reflect.Pointer {
		return p.Elem().Interface()
	}
	return result
}

// readResource answers resources/read of a workspace URI. mcp-go would
// answer every error of its handler as internal (-32603), where the
// protocol says -32002 for a resource that is not there: a client tells a
// missing file from a failure by the code.
func (r *taskRouter) readResource(ctx context.Context, scope, uri string) (any, *rpcError) {
	contents, rerr := r.f.readWorkspace(ctx, r.stdio, scope, uri)
	if rerr != nil {
		return nil, rerr
	}
	return mcp.ReadResourceResult{Contents: contents}, nil
}

// encodeResponse is the JSON-RPC response to the request of id.
func encodeResponse(id json.RawMessage, result any, rerr *rpcError) []byte {
	resp := struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result,omitempty"`
		Error   *rpcError       `json:"error,omitempty"`
	}{JSONRPC: mcp.JSONRPC_VERSION, ID: id, Result: result, Error: rerr}
	data, err := json.Marshal(resp)
	if err != nil {
		resp.Result, resp.Error = nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: err.Error()}
		data, _ = json.Marshal(resp)
	}
	return data
}

// unknownTask is the error for a task id the scope does not have: never
// created, another scope's, or expired. The three read the same.
func unknownTask(id string) *rpcError {
	return &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("unknown task %q: no such task in this session (or it has expired)", id)}
}

// storeError is the error for a task store that did not answer.
func storeError(err error) *rpcError {
	return &rpcError{Code: mcp.INTERNAL_ERROR, Message: "the task store did not answer: " + err.Error() + "; try again"}
}

// createTask records a task of scope for the call p and starts it.
func (r *taskRouter) createTask(ctx context.Context, scope string, p mcp.CallToolParams) (any, *rpcError) {
	tool := r.srv.GetTool(p.Name)
	if tool == nil {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("tool '%s' not found", p.Name)}
	}
	if r.f.draining.Load() {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: "this frontend is stopping; send the call again"}
	}
	size := int64(len(p.RawArguments))
	owner := taskCaller(ctx)
	if ok, own := r.f.taskSlots.take(owner, size, r.f.cfg.RequestBudget); own {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf(
			"you have too many tasks running on this frontend (at most %d, holding at most %d bytes of arguments, "+
				"of the frontend's %d tasks); wait for some to finish, or make a blocking call", maxCallerTasks, r.f.cfg.RequestBudget/4, maxRunningTasks)}
	} else if !ok {
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf(
			"too many tasks are running on this frontend (at most %d, holding at most %d bytes of arguments); "+
				"wait for some to finish, or make a blocking call", maxRunningTasks, r.f.cfg.RequestBudget)}
	}
	started := false
	defer func() {
		if !started {
			r.f.taskSlots.give(owner, size)
		}
	}()
	// Compared in milliseconds: a client's ttl near the largest int64
	// overflows as a duration.
	ttl := r.f.broker.Retention().Milliseconds()
	if p.Task.TTL != nil && *p.Task.TTL > 0 {
		ttl = min(ttl, *p.Task.TTL)
	}
	now := time.Now().UTC()
	rec := &broker.TaskRecord{TaskID: ulid.Make().String(), Scope: scope, Tool: p.Name, CreatedAt: now, TTLMS: ttl,
		Deadline: now.Add(r.f.taskDeadline())}
	if rerr := r.admitTask(ctx, rec.TaskID); rerr != nil {
		return nil, rerr
	}
	if err := r.f.broker.PutTask(ctx, rec); err != nil {
		return nil, storeError(err)
	}
	req := mcp.CallToolRequest{}
	req.Method = string(mcp.MethodToolsCall)
	req.Params = p
	req.Params.Task = nil
	r.f.tasks.Add(1)
	started = true
	// The request's values (the caller's credentials) without its end, and
	// the workspace its `workspace` argument names, as useWorkspace gives a
	// call's tool.
	caller := context.WithValue(context.WithoutCancel(ctx), taskScopeKey{}, scope)
	caller = r.f.withWorkspace(caller, r.stdio, req, &tool.Tool)
	go func() {
		defer r.f.tasks.Done()
		defer r.f.taskSlots.give(owner, size)
		r.f.runTask(caller, rec, taskTool(tool.Handler), req)
	}()
	return mcp.CreateTaskResult{Task: taskOf(rec, mcp.TaskStatusWorking, "", now)}, nil
}

// admitTask takes a place in the caller's tenant's jobs_per_minute for a
// new task, id, or refuses it. A task is two keys in the results bucket,
// kept for the results' retention whatever its call does, and until
// 2026-12-04 a task whose call was refused (an empty code, a quota) counted
// in no quota: one client made 960 such tasks a second under
// jobs_per_minute=10. The job of a code-running task has the task's id, so
// its own admission finds the place taken and counts nothing more; the
// build of an environment tool's task is a job of its own, and counts
// again.
func (r *taskRouter) admitTask(ctx context.Context, id string) *rpcError {
	if r.f.cfg.Quotas == nil {
		return nil
	}
	tenant := callerTenant(ctx)
	_, limit, adm, _ := r.f.admitQuota(ctx, quota.JobsPerMinute, tenant, id, time.Minute)
	if adm.Admitted {
		return nil
	}
	refused := quotaRefusal{name: quota.JobsPerMinute, count: adm.Count, limit: limit, retry: adm.Retry}
	return &rpcError{Code: mcp.INTERNAL_ERROR, Message: refused.exceeded(tenant).Message}
}

// taskOf is rec as an MCP task of status.
func taskOf(rec *broker.TaskRecord, status mcp.TaskStatus, message string, updated time.Time) mcp.Task {
	t := mcp.NewTask(rec.TaskID, mcp.WithTaskTTL(rec.TTLMS), mcp.WithTaskPollInterval(taskPollMS))
	t.Status, t.StatusMessage = status, message
	t.CreatedAt = rec.CreatedAt.Format(time.RFC3339Nano)
	if updated.IsZero() {
		updated = rec.CreatedAt
	}
	t.LastUpdatedAt = updated.UTC().Format(time.RFC3339Nano)
	return t
}

// runTask runs the tool of task rec (handler, as registered) and stores
// its outcome. caller holds the values of the request that created the
// task (who called: quotas, audit, revocation and workspace handles go by
// it) and never ends; the task's context ends when the task is cancelled
// (the tool then cancels its job) or when the frontend is aborted (the job
// runs on, and no outcome is stored: a job that is the task answers for
// it).
func (f *Frontend) runTask(caller context.Context, rec *broker.TaskRecord, handler server.ToolHandlerFunc, req mcp.CallToolRequest) {
	log := f.log.With("task", rec.TaskID, "tool", rec.Tool, "scope", rec.Scope)
	ctx, cancel := context.WithCancelCause(caller)
	defer cancel(nil)
	stopHard := context.AfterFunc(f.hard, func() { cancel(errFrontendStopped) })
	defer stopHard()
	stopWatch, err := f.broker.WatchCancel(rec.TaskID, func() { cancel(errTaskCancelled) })
	if err != nil {
		log.Warn("cannot watch for the task's cancellation", "err", err)
	} else {
		defer stopWatch()
	}
	ctx = context.WithValue(ctx, taskScopeKey{}, rec.Scope)
	if taskTools[rec.Tool].jobIsTask {
		ctx = context.WithValue(ctx, taskJobKey{}, rec.TaskID)
	}
	res, err := handler(ctx, req)
	out := f.outcomeOf(res, err, errors.Is(context.Cause(ctx), errTaskCancelled))
	if errors.Is(context.Cause(ctx), errFrontendStopped) {
		if taskTools[rec.Tool].jobIsTask {
			log.Warn("frontend stopped before the task finished; its job runs on and answers for it")
			return
		}
		log.Warn("frontend stopped before the task finished")
		out, _ = json.Marshal(taskOutcome{Status: mcp.TaskStatusFailed, Ended: time.Now().UTC(),
			Message: "the frontend running this task stopped before it finished; its job may have run: check the session's state and call again"})
	}
	sctx, end := context.WithTimeout(context.Background(), publishAttempt)
	defer end()
	if _, err := f.broker.PutTaskOutcome(sctx, rec.Scope, rec.TaskID, out); err != nil {
		log.Error("store the task's outcome", "err", err)
	}
}

// outcomeOf encodes a tool's result as a task outcome.
func (f *Frontend) outcomeOf(res *mcp.CallToolResult, err error, cancelled bool) []byte {
	o := taskOutcome{Status: mcp.TaskStatusCompleted, Ended: time.Now().UTC()}
	switch {
	case err != nil:
		o.Status, o.Message = mcp.TaskStatusFailed, err.Error()
	case res == nil:
		o.Status, o.Message = mcp.TaskStatusFailed, "the tool returned no result"
	default:
		o.Status = outcomeStatus(res, cancelled)
		if o.Status != mcp.TaskStatusCompleted {
			o.Message = resultMessage(res)
		}
		if cancelled {
			keepCancelled(&o)
		}
		o.Result, _ = json.Marshal(res)
		if len(o.Result) > f.outcomeLimit() {
			// Too large for one message: the job's stored result
			// renders it again.
			var er ExecResult
			if b, _ := json.Marshal(res.StructuredContent); json.Unmarshal(b, &er) == nil && er.JobID != "" {
				o.Result, o.JobID, o.Filename = nil, er.JobID, er.Filename
			} else {
				o.Result, o.Status, o.Message = nil, mcp.TaskStatusFailed, "the tool's result is too large to keep"
			}
		}
	}
	data, _ := json.Marshal(o)
	return data
}

// outcomeLimit is the largest tool result kept inline in a task outcome.
func (f *Frontend) outcomeLimit() int { return 512 << 10 }

// outcomeStatus is the task status of a tool's result: failed when the
// tool failed, cancelled when the task was cancelled and the tool did not
// finish anyway.
func outcomeStatus(res *mcp.CallToolResult, cancelled bool) mcp.TaskStatus {
	var st struct {
		Status string `json:"status"`
	}
	if b, err := json.Marshal(res.StructuredContent); err == nil {
		_ = json.Unmarshal(b, &st)
	}
	switch {
	case st.Status == string(wire.StatusCancelled) || (cancelled && res.IsError):
		return mcp.TaskStatusCancelled
	case res.IsError:
		return mcp.TaskStatusFailed
	}
	return mcp.TaskStatusCompleted
}

// maxStatusMessage bounds a task's statusMessage taken from its result.
const maxStatusMessage = 1000

// resultMessage is why a tool's result failed, as a task's statusMessage
// says it: the status and message of its structured content (every
// result shape has them), else its first text, on one line, clipped.
func resultMessage(res *mcp.CallToolResult) string {
	var st struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	if b, err := json.Marshal(res.StructuredContent); err == nil {
		_ = json.Unmarshal(b, &st)
	}
	msg := st.Message
	if msg == "" {
		for _, c := range res.Content {
			if tc, ok := c.(mcp.TextContent); ok && strings.TrimSpace(tc.Text) != "" {
				msg = tc.Text
				break
			}
		}
	}
	msg = strings.Join(strings.Fields(msg), " ")
	switch {
	case msg == "" && st.Status == "":
		msg = "the tool failed"
	case msg == "":
		msg = st.Status
	case st.Status != "" && !strings.HasPrefix(msg, st.Status):
		msg = st.Status + ": " + msg
	}
	if len(msg) > maxStatusMessage {
		msg = strings.ToValidUTF8(msg[:maxStatusMessage], "") + "…"
	}
	return msg
}

// taskState is what is known of a task now: its outcome when it is over
// (nil while it runs), and whether it is marked cancelled.
type taskState struct {
	rec       *broker.TaskRecord
	outcome   *taskOutcome
	cancelled bool
	updated   time.Time
}

// status is the task's MCP status.
func (s *taskState) status() (mcp.TaskStatus, string) {
	switch {
	case s.outcome != nil:
		return s.outcome.Status, s.outcome.Message
	case s.cancelled:
		return mcp.TaskStatusCancelled, "cancelled; its job is being stopped"
	}
	return mcp.TaskStatusWorking, ""
}

func (s *taskState) task() mcp.Task {
	st, msg := s.status()
	return taskOf(s.rec, st, msg, s.updated)
}

// state reads scope's task id: its record, outcome and cancel mark. A task
// whose job is the task and whose frontend stopped before storing an
// outcome is answered by the job's result.
func (f *Frontend) state(ctx context.Context, scope, id string) (*taskState, *rpcError) {
	rec, err := f.broker.GetTask(ctx, scope, id)
	switch {
	case errors.Is(err, broker.ErrNoTask):
		return nil, unknownTask(id)
	case err != nil:
		return nil, storeError(err)
	}
	s := &taskState{rec: rec}
	data, err := f.broker.GetTaskOutcome(ctx, scope, id)
	switch {
	case err == nil:
		var o taskOutcome
		if err := json.Unmarshal(data, &o); err != nil {
			return nil, storeError(err)
		}
		s.outcome, s.updated = &o, o.Ended // zero (an outcome stored without it): created at
		return s, nil
	case !errors.Is(err, broker.ErrNoTaskOutcome):
		return nil, storeError(err)
	}
	if taskTools[rec.Tool].jobIsTask {
		if res, err := f.broker.GetResult(ctx, id); err == nil && res.Scope == scope {
			s.outcome, s.updated = jobOutcome(res), res.FinishedAt
			if s.outcome.Status != mcp.TaskStatusCancelled {
				if _, marked, err := f.broker.JobCancelledAt(ctx, id); err == nil && marked {
					keepCancelled(s.outcome)
				}
			}
			return s, nil
		}
	}
	// A task marked cancelled and not over yet was last updated when it
	// was marked.
	if s.updated, s.cancelled, err = f.broker.JobCancelledAt(ctx, id); err != nil {
		return nil, storeError(err)
	}
	if orphaned(rec) {
		s.outcome, s.updated = orphanOutcome(rec, s.cancelled), rec.Deadline
	}
	return s, nil
}

// taskDeadline is how long after its creation a task is over whatever
// happened (broker.TaskRecord.Deadline): its job is queued within the
// queue wait, may wait for its environment's build and must start by its
// own deadline, then runs for at most its timeout, a build at most
// InstallTimeout; a minute more for the stores.
func (f *Frontend) taskDeadline() time.Duration {
	return f.cfg.QueueWait + 2*(f.cfg.MaxTimeout+f.cfg.InstallTimeout) + time.Minute
}

// orphaned says whether rec's task is past its deadline: the caller found
// neither an outcome nor its job's result, so the frontend that ran it
// went away (killed, or stopped while the job still waited to be queued)
// and nothing will ever answer for it. Such a task was "working" until it
// expired, a day later, and tasks/result waited for it as long.
func orphaned(rec *broker.TaskRecord) bool {
	return !rec.Deadline.IsZero() && time.Now().After(rec.Deadline)
}

// orphanOutcome is the outcome of an orphaned task.
func orphanOutcome(rec *broker.TaskRecord, cancelled bool) *taskOutcome {
	st := mcp.TaskStatusFailed
	if cancelled {
		st = mcp.TaskStatusCancelled
	}
	return &taskOutcome{Status: st, Ended: rec.Deadline, Message: fmt.Sprintf(
		"internal: the frontend running this task went away before it was over, and nothing answered for it by %s; "+
			"its job may have run: check the session's state and call again", rec.Deadline.Format(time.RFC3339))}
}

// keepCancelled makes o, the outcome of a task marked cancelled, cancelled
// whatever its tool did: tasks/cancel answered "cancelled" (it marks only a
// task that is not over), and a cancelled task stays cancelled, as the
// revision says of every terminal status. A job that finished before the
// cancel reached it (its worker stopped, or the job just ending) keeps its
// result, which tasks/result returns, and the statusMessage says so. Until
// 2026-12-04 such a task went from cancelled, in the cancel's answer and
// tasks/get, to completed once its job's result was stored.
func keepCancelled(o *taskOutcome) {
	if o.Status == mcp.TaskStatusCancelled {
		return
	}
	what := "completed"
	if o.Message != "" {
		what = o.Message
	}
	o.Status = mcp.TaskStatusCancelled
	o.Message = "cancelled, but its tool had finished before the cancel reached it (" + what + "); tasks/result returns its result"
}

// jobOutcome is the outcome of a task whose job is the task, from the
// job's result.
func jobOutcome(res *wire.Result) *taskOutcome {
	tr := toolResult(res, "")
	o := &taskOutcome{Status: outcomeStatus(tr, false), JobID: res.JobID}
	if o.Status != mcp.TaskStatusCompleted {
		o.Message = string(res.Status)
		if res.Message != "" {
			o.Message += ": " + res.Message
		}
	}
	return o
}

func (r *taskRouter) getTask(ctx context.Context, scope, id string) (any, *rpcError) {
	s, rerr := r.f.state(ctx, scope, id)
	if rerr != nil {
		return nil, rerr
	}
	return mcp.NewGetTaskResult(s.task()), nil
}

func (r *taskRouter) cancelTask(ctx context.Context, scope, id string) (any, *rpcError) {
	s, rerr := r.f.state(ctx, scope, id)
	if rerr != nil {
		return nil, rerr
	}
	// The revision: a task in a terminal status (completed, failed or
	// cancelled) cannot be cancelled, -32602.
	if st, _ := s.status(); st.IsTerminal() {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: fmt.Sprintf("cannot cancel task %s: it is %s already, a terminal status", id, st)}
	}
	if err := r.f.broker.CancelJob(ctx, id); err != nil {
		return nil, storeError(err)
	}
	s.cancelled, s.updated = true, time.Now()
	return mcp.NewCancelTaskResult(s.task()), nil
}

// validTaskCursor says whether cursor is one listTasks can have returned as
// nextCursor (a task id, a ULID as it is written), or none. Any other string
// used to be taken as a position in the list, so that a made-up cursor gave
// a page that silently skipped tasks, or every task from the first, where
// the protocol asks for error -32602.
func validTaskCursor(cursor string) bool {
	if cursor == "" {
		return true
	}
	id, err := ulid.ParseStrict(cursor)
	return err == nil && id.String() == cursor
}

func (r *taskRouter) listTasks(ctx context.Context, scope, cursor string) (any, *rpcError) {
	recs, more, err := r.f.broker.ListTasks(ctx, scope, cursor, taskListPage)
	if err != nil {
		return nil, storeError(err)
	}
	res := mcp.ListTasksResult{Tasks: make([]mcp.Task, 0, len(recs))}
	for _, rec := range recs {
		s, rerr := r.f.state(ctx, scope, rec.TaskID)
		if rerr != nil {
			continue // expired since it was listed
		}
		res.Tasks = append(res.Tasks, s.task())
	}
	if more && len(recs) > 0 {
		res.NextCursor = mcp.Cursor(recs[len(recs)-1].TaskID)
	}
	return res, nil
}

// taskResult waits until the task is over and returns the tool's result,
// as the call would have returned it, tied to the task by its _meta.
func (r *taskRouter) taskResult(ctx context.Context, scope, id string) (any, *rpcError) {
	s, rerr := r.f.state(ctx, scope, id)
	if rerr != nil {
		return nil, rerr
	}
	o := s.outcome
	if o == nil {
		// Wait for the outcome; a job that is the task may end without one
		// (its frontend stopped): its result is the answer then.
		var jobRes *wire.Result
		settled := func(ctx context.Context) error {
			if taskTools[s.rec.Tool].jobIsTask {
				res, err := r.f.broker.GetResult(ctx, id)
				if err == nil && res.Scope == scope {
					jobRes = res
					return errJobSettled
				}
			}
			if orphaned(s.rec) {
				return errTaskOrphaned
			}
			return nil
		}
		data, err := r.f.broker.WaitTaskOutcome(ctx, scope, id, settled)
		switch {
		case errors.Is(err, errJobSettled):
			o = jobOutcome(jobRes)
		case errors.Is(err, errTaskOrphaned):
			cancelled, _ := r.f.broker.JobCancelled(ctx, id)
			o = orphanOutcome(s.rec, cancelled)
		case err != nil:
			return nil, &rpcError{Code: mcp.REQUEST_INTERRUPTED, Message: "waiting for the task's result: " + err.Error()}
		default:
			o = &taskOutcome{}
			if err := json.Unmarshal(data, o); err != nil {
				return nil, storeError(err)
			}
		}
	}
	return r.f.renderOutcome(ctx, id, o, r.stdio)
}

// errJobSettled stops the wait for a task's outcome when its job's result
// answers for it.
var errJobSettled = errors.New("the task's job has a result")

// errTaskOrphaned stops the wait for a task's outcome when the task is
// past its deadline with none (orphaned).
var errTaskOrphaned = errors.New("the task is past its deadline without an outcome")

// renderOutcome is the tasks/result answer of an outcome; on stdio, a job
// result too large for one message has its output cut (fitStdioResult), as
// the call's would.
func (f *Frontend) renderOutcome(ctx context.Context, id string, o *taskOutcome, stdio bool) (any, *rpcError) {
	var tr *mcp.CallToolResult
	switch {
	case len(o.Result) > 0:
		raw := json.RawMessage(o.Result)
		res, err := mcp.ParseCallToolResult(&raw)
		if err != nil {
			return nil, storeError(err)
		}
		tr = res
	case o.JobID != "":
		res, err := f.broker.GetResult(ctx, o.JobID)
		if err != nil {
			return nil, storeError(err)
		}
		tr = toolResult(res, o.Filename)
		if stdio {
			tr = fitStdioResult(tr, f.stdioMessageLimit())
		}
	default:
		return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: o.Message}
	}
	out := mcp.TaskResultResult{Content: tr.Content, StructuredContent: tr.StructuredContent, IsError: tr.IsError}
	out.Meta = mcp.WithRelatedTask(id)
	return out, nil
}
