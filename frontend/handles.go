package frontend

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Workspace handles. A workspace is a session scope: its working directory,
// code files, runs, job results and environment choice. Its state outlives
// the MCP session that made it; a handle is how a caller reaches it again
// from another session, or from sessionless requests: workspace_info
// returns the handle of the call's workspace, new_workspace makes a fresh
// one, and any tool called with the argument `workspace` set to a handle
// works in that workspace.
//
// A handle is a random name (wsp_ and 26 characters of base32, 130 bits),
// and no key: its record is stored under a hash of the handle AND its
// owner (the caller's tenant and principal, see ownerFrom), so the same
// handle presented by another principal finds no record and gets exactly
// the answer of a handle that never existed. Without authentication the
// owner is the one local principal (stdio), or whatever identifies an
// unauthenticated HTTP caller (scopeFrom's rules), so there a handle is a
// bearer secret among the callers of an open server.

// workspaceArg is the argument every tool takes to work in a workspace
// named by its handle.
const workspaceArg = "workspace"

// handleRe is the form of every handle new_workspace and workspace_info
// make: anything else is refused without a look-up.
var handleRe = regexp.MustCompile(`^wsp_[a-z2-7]{26}$`)

// handleRecord is what a handle names, stored under Keys.Handle.
type handleRecord struct {
	Scope     string    `json:"scope"`
	Tenant    string    `json:"tenant,omitempty"`
	Principal string    `json:"principal,omitempty"`
	Created   time.Time `json:"created"`
}

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

// newHandle returns a fresh random handle.
func newHandle() string {
	var b [17]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "wsp_" + strings.ToLower(b32.EncodeToString(b[:]))[:26]
}

type (
	workspaceCtxKey struct{}
)

// workspaceChoice is a call's workspace as its `workspace` argument named
// it: the scope it resolved to, or why it did not resolve.
type workspaceChoice struct {
	scope string
	err   error
}

// ownerFrom is who owns the workspaces a call makes and may reach: the
// authenticated identity, else (no authentication) the stdio principal or
// scopeFrom's identification of an HTTP caller.
func ownerFrom(ctx context.Context, stdio bool) string {
	switch {
	case stdio:
		return "stdio\x00" + StdioScope
	case ctx.Value(identityKey{}) != nil:
		return ctx.Value(identityKey{}).(string)
	case ctx.Value(principalKey{}) != nil:
		return "header\x00" + ctx.Value(principalKey{}).(string)
	}
	return "anonymous"
}

// handleKey is the state-store key of owner's handle h.
func (f *Frontend) handleKey(owner, h string) string {
	return f.cfg.Keys.Handle(digest(owner + "\x00handle\x00" + h))
}

// useWorkspace is the tool middleware that resolves a call's `workspace`
// argument, when it has one, to the scope that the tool's handler then
// gets (callScope). A handle that is malformed, unknown, or another
// principal's, fails the call before the tool does anything; so does an
// argument the tool does not take. tool looks a tool up by name.
func (f *Frontend) useWorkspace(stdio bool, tool func(name string) *mcp.Tool) server.ToolHandlerMiddleware {
	return func(next server.ToolHandlerFunc) server.ToolHandlerFunc {
		return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return next(f.withWorkspace(ctx, stdio, req, tool(req.Params.Name)), req)
		}
	}
}

// withWorkspace is ctx with the workspace req's `workspace` argument
// chooses (useWorkspace; a task's before it starts, createTask), or with
// the error that fails the call: an argument that t (when not nil) does
// not take, or a bad handle.
func (f *Frontend) withWorkspace(ctx context.Context, stdio bool, req mcp.CallToolRequest, t *mcp.Tool) context.Context {
	var c workspaceChoice
	if err := argumentsObject(req.Params.Name, req.Params.Arguments); err != nil {
		return context.WithValue(ctx, workspaceCtxKey{}, workspaceChoice{err: err})
	}
	if t != nil {
		if err := checkArguments(t, req.GetArguments()); err != nil {
			return context.WithValue(ctx, workspaceCtxKey{}, workspaceChoice{err: err})
		}
	}
	switch v, present := req.GetArguments()[workspaceArg]; {
	case !present || v == nil || v == "":
		c.scope = scopeFrom(ctx, stdio)
	case isString(v):
		c.scope, c.err = f.resolveHandle(ctx, ownerFrom(ctx, stdio), v.(string))
	default:
		c.err = rejected("argument '%s' must be a string: a handle that workspace_info or new_workspace returned", workspaceArg)
	}
	if c.err == nil && !ownerNotedElsewhere[req.Params.Name] {
		f.noteOwner(ctx, c.scope)
	}
	return context.WithValue(ctx, workspaceCtxKey{}, c)
}

// ownerNotedElsewhere are the tools whose call records its workspace's
// owner only when it stores something there: those that read or remove
// what the workspace holds (a workspace that holds something has its
// owner recorded already) and those whose jobs record it once admitted
// (dispatch). An owner record is kept for the workspace ttl and counted in
// no quota, and until 2026-12-05 every call recorded one: a client that
// sent list_contexts with a new session id each time (the id is checked by
// its form alone) left 600 records a second in the state store that every
// tenant shares, under any quota, and a call refused by a quota left one
// too.
var ownerNotedElsewhere = map[string]bool{
	"get_job_result": true, "get_job_results": true, "cancel_batch": true, "read_code_file": true,
	"list_code_files": true, "list_contexts": true, "get_environment_config": true, "delete_code_file": true,
	"reset_context": true, "close_context": true,
	"execute_code": true, "execute_code_file": true, "upload_file": true, "check_installed_packages": true,
	"run_in_context": true,
}

// argumentsObject refuses a call's arguments that are not a JSON object:
// mcp-go reads them as no arguments at all, and the tool would say that a
// required one is missing when it was sent (as a list, or as the JSON text
// of the object, as a bridge from a function-calling API may pass it on).
// An empty list is no arguments: some JSON encoders (PHP's) write an empty
// map so.
func argumentsObject(tool string, v any) error {
	switch a := v.(type) {
	case nil, map[string]any:
		return nil
	case []any:
		if len(a) == 0 {
			return nil
		}
	case string:
		return rejected("the arguments of %s must be a JSON object of name: value, not a string (JSON text of an object: send the object itself); nothing was done", tool)
	}
	return rejected("the arguments of %s must be a JSON object of name: value, not %s; nothing was done", tool, valueName(v))
}

// checkArguments refuses args that t does not take as they are: an
// argument it does not declare, or one of another JSON type.
func checkArguments(t *mcp.Tool, args map[string]any) error {
	known, ok := declaredArguments(t)
	if !ok {
		return nil
	}
	if err := unknownArgument(t.Name, known, args); err != nil {
		return err
	}
	return wrongTypedArgument(known, args)
}

// unknownArgument refuses an argument that tool does not declare (known).
// A client that guessed a name (timeout for timeout_seconds) would
// otherwise have its call run as if it had not passed it: with the default
// timeout, the default limits.
func unknownArgument(tool string, known, args map[string]any) error {
	var unknown []string
	for name := range args {
		if _, ok := known[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	names := slices.Sorted(maps.Keys(known))
	listed, more := unknown, ""
	if len(listed) > maxEchoedNames {
		listed, more = listed[:maxEchoedNames], fmt.Sprintf(" and %d more", len(unknown)-maxEchoedNames)
	}
	msg := fmt.Sprintf("%s takes no argument %s%s; nothing was done. Its arguments: %s",
		tool, quoteJoin(listed), more, strings.Join(names, ", "))
	for _, u := range listed {
		for _, n := range names {
			if u != n && (strings.HasPrefix(n, u) || strings.HasPrefix(u, n) || strings.EqualFold(u, n)) {
				msg += fmt.Sprintf(" (did you mean %q for %s?)", n, echo(u))
				break
			}
		}
	}
	return rejected("%s", msg)
}

// declaredArguments is the properties of t's input schema, each the
// schema of one argument; false when the schema cannot be read.
func declaredArguments(t *mcp.Tool) (map[string]any, bool) {
	if t.RawInputSchema == nil {
		return t.InputSchema.Properties, true
	}
	var raw struct {
		Properties map[string]any `json:"properties"`
	}
	if json.Unmarshal(t.RawInputSchema, &raw) != nil {
		return nil, false
	}
	return raw.Properties, true
}

// wrongTypedArgument refuses an argument whose JSON type is not the one
// the tool's input schema declares for it in known (and an array item not
// of its items' type): each tool would otherwise read it as absent, and say that a
// required argument is missing when it was sent as a number. null counts
// as absent, and a null item is left to the tool; `workspace` has its own
// words (withWorkspace).
func wrongTypedArgument(known, args map[string]any) error {
	for _, name := range slices.Sorted(maps.Keys(args)) {
		prop, _ := known[name].(map[string]any)
		v := args[name]
		if v == nil || name == workspaceArg || prop == nil {
			continue
		}
		if !typeFits(prop, v) {
			return rejected("argument '%s' must be %s, not %s; nothing was done", name, typeName(prop), valueName(v))
		}
		items, _ := prop["items"].(map[string]any)
		if arr, ok := v.([]any); ok && items != nil {
			for i, item := range arr {
				if item != nil && !typeFits(items, item) {
					return rejected("argument '%s' must be %s: item %d is %s; nothing was done", name, typeName(prop), i+1, valueName(item))
				}
			}
		}
	}
	return nil
}

// typeFits says whether v's JSON type is the one schema declares (any
// when it declares none).
func typeFits(schema map[string]any, v any) bool {
	want, _ := schema["type"].(string)
	got := jsonType(v)
	return want == "" || got == want || want == "number" && got == "integer"
}

// typeName is the type schema declares, in words: "a string", "a list
// of strings", "a whole number"; with its values when it lists them.
func typeName(schema map[string]any) string {
	want, _ := schema["type"].(string)
	name := map[string]string{"string": "a string", "number": "a number", "integer": "a whole number",
		"boolean": "true or false", "object": "an object", "array": "a list", "null": "null"}[want]
	if name == "" {
		name = want
	}
	if items, _ := schema["items"].(map[string]any); want == "array" && items != nil {
		if it, _ := items["type"].(string); it != "" {
			name += " of " + it + "s"
		}
	}
	if enum, ok := schema["enum"].([]string); ok {
		name += " (one of " + strings.Join(enum, ", ") + ")"
	}
	return name
}

// valueName is what v is, in words: "a number", "a list"; a boolean or
// a fraction is shown itself.
func valueName(v any) string {
	switch jsonType(v) {
	case "number", "boolean":
		return fmt.Sprintf("%v", v)
	case "integer":
		return "a number"
	}
	return typeName(map[string]any{"type": jsonType(v)})
}

// jsonType is the JSON Schema type of an argument's value as decoded
// from JSON ("integer" for a whole number), or given by an in-process
// client as Go values.
func jsonType(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if x == math.Trunc(x) && !math.IsInf(x, 0) {
			return "integer"
		}
		return "number"
	case float32:
		return jsonType(float64(x))
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return "integer"
		}
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Map, reflect.Struct:
		return "object"
	}
	return "unknown"
}

// quoteJoin is names quoted and joined with ", ".
func quoteJoin(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = echo(n)
	}
	return strings.Join(q, ", ")
}

// maxEchoedNames is the most unknown argument names a refusal lists.
const maxEchoedNames = 8

// maxEcho is the most bytes of a caller's string an error quotes back.
const maxEcho = 64

// echo quotes s for an error message, cut to its first maxEcho bytes
// (on a whole character) and its length when longer: a refusal must not
// send a caller's megabytes back to it, nor into the logs.
func echo(s string) string {
	if len(s) <= maxEcho {
		return strconv.Quote(s)
	}
	cut := maxEcho
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:cut], len(s))
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// callScope is the scope a tool call works in: the workspace its
// `workspace` argument named, else its session's (scopeFrom).
func callScope(ctx context.Context, stdio bool) (string, error) {
	if c, ok := ctx.Value(workspaceCtxKey{}).(workspaceChoice); ok {
		return c.scope, c.err
	}
	return scopeFrom(ctx, stdio), nil
}

// unknownWorkspace is the one answer for a handle that names nothing of
// the caller's, whether it never existed, expired, or is another
// principal's.
func unknownWorkspace(h string) *toolError {
	return rejected("no workspace %s: it was never created for you, or it has expired", h)
}

// resolveHandle returns the scope of owner's handle h.
func (f *Frontend) resolveHandle(ctx context.Context, owner, h string) (string, error) {
	if !handleRe.MatchString(h) {
		return "", rejected("workspace %q is not a workspace handle (they look like wsp_ and 26 letters and digits, as workspace_info returns)", h)
	}
	data, err := f.store.Get(ctx, f.handleKey(owner, h))
	if errors.Is(err, statestore.ErrNotFound) {
		return "", unknownWorkspace(h)
	}
	if err != nil {
		return "", internal("cannot read workspace %s: %v; try again", h, err)
	}
	var rec handleRecord
	if err := json.Unmarshal(data, &rec); err != nil || !wire.ValidScope(rec.Scope) {
		return "", internal("workspace %s has a damaged record", h)
	}
	f.touchWorkspace(ctx, rec.Scope)
	return rec.Scope, nil
}

// scopeHandle is the value of Keys.ScopeHandle: the handle, and the id of
// its record's key (which names the owner, so that the collector, who
// knows no owner, can delete it).
type scopeHandle struct {
	Handle string `json:"handle"`
	Key    string `json:"key"`
}

// handleOf returns the handle of scope, owned by owner, making one when the
// scope has none. Two calls at once get the same handle: the scope's
// handle is written create-only, after the handle's own record, so a
// handle is never returned before it resolves.
func (f *Frontend) handleOf(ctx context.Context, owner, scope string) (string, error) {
	key := f.cfg.Keys.ScopeHandle(scope)
	if h, err := f.readScopeHandle(ctx, key); err == nil {
		return h.Handle, nil
	} else if !errors.Is(err, statestore.ErrNotFound) {
		return "", err
	}
	if err := f.admitWorkspace(ctx, scope); err != nil {
		return "", err
	}
	h := newHandle()
	rec := handleRecord{Scope: scope, Created: time.Now().UTC()}
	if id, ok := auth.FromContext(ctx); ok {
		rec.Tenant, rec.Principal = id.Tenant, id.Principal
	}
	data, _ := json.Marshal(rec)
	hkey := f.handleKey(owner, h)
	if err := f.store.Set(ctx, hkey, data, 0); err != nil {
		return "", err
	}
	sh, _ := json.Marshal(scopeHandle{Handle: h, Key: strings.TrimPrefix(hkey, f.cfg.Keys.Handle(""))})
	won, err := f.store.SetNX(ctx, key, sh, 0)
	if err != nil || won {
		return h, err
	}
	_ = f.store.Delete(ctx, hkey)
	got, err := f.readScopeHandle(ctx, key)
	return got.Handle, err
}

// readScopeHandle reads the value of Keys.ScopeHandle at key.
func (f *Frontend) readScopeHandle(ctx context.Context, key string) (scopeHandle, error) {
	var sh scopeHandle
	data, err := f.store.Get(ctx, key)
	if err != nil {
		return sh, err
	}
	if err := json.Unmarshal(data, &sh); err != nil || !handleRe.MatchString(sh.Handle) {
		return sh, fmt.Errorf("the handle record of a workspace is damaged")
	}
	return sh, nil
}

// WorkspaceResult is the structured content of workspace_info and
// new_workspace.
type WorkspaceResult struct {
	Status    string `json:"status" jsonschema_description:"ok, rejected or internal"`
	Workspace string `json:"workspace,omitempty" jsonschema_description:"the workspace's handle: pass it as the argument 'workspace' of any tool, from any later session, to work in this workspace"`
	Message   string `json:"message"`
}

func workspaceResult(r WorkspaceResult) *mcp.CallToolResult {
	out := mcp.NewToolResultStructured(r, statusLine(r.Status, r.Message))
	out.IsError = r.Status != fileStatusOK
	return out
}

// workspaceError is err of recording a workspace's handle: a refusal
// (over the workspaces quota) as it is, anything else internal.
func workspaceError(err error, what string) error {
	if te := (*toolError)(nil); errors.As(err, &te) {
		return te
	}
	return internal("%s: %v; try again", what, err)
}

func workspaceFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	return workspaceResult(WorkspaceResult{Status: string(te.Status), Message: te.Message})
}

// registerWorkspaceTools adds workspace_info and new_workspace.
func (f *Frontend) registerWorkspaceTools(s *server.MCPServer, stdio bool) {
	s.AddTool(mcp.NewTool("workspace_info",
		mcp.WithDescription("The handle of this call's workspace (its working directory, code files, runs, results and environment). "+
			"Keep it: a later session (after a reconnect, or without sessions) passes it as the argument 'workspace' of any tool to work in this workspace again."),
		mcp.WithOutputSchema[WorkspaceResult](),
		hints(idempotent), // records the handle on the first call
	), handler(stdio, func(ctx context.Context, _ mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
		h, err := f.handleOf(ctx, ownerFrom(ctx, stdio), scope)
		if err != nil {
			return nil, workspaceError(err, "cannot record the workspace's handle")
		}
		return workspaceResult(WorkspaceResult{Status: fileStatusOK, Workspace: h,
			Message: fmt.Sprintf("workspace %s; pass workspace=%q to any tool to work in it from another session", h, h)}), nil
	}, workspaceFailure))

	s.AddTool(mcp.NewTool("new_workspace",
		mcp.WithDescription("Make a new, empty workspace and return its handle; pass it as the argument 'workspace' of any tool to work in it."),
		mcp.WithOutputSchema[WorkspaceResult](),
		hints(0),
	), handler(stdio, func(ctx context.Context, _ mcp.CallToolRequest, _ string) (*mcp.CallToolResult, error) {
		owner := ownerFrom(ctx, stdio)
		scope := "w-" + digest(owner+"\x00workspace\x00"+newHandle())
		h, err := f.handleOf(ctx, owner, scope)
		if err != nil {
			return nil, workspaceError(err, "cannot record the new workspace")
		}
		return workspaceResult(WorkspaceResult{Status: fileStatusOK, Workspace: h,
			Message: fmt.Sprintf("new workspace %s; pass workspace=%q to any tool to work in it", h, h)}), nil
	}, workspaceFailure))
}

// addWorkspaceArg declares the optional `workspace` argument on every tool
// of s (useWorkspace reads it).
func addWorkspaceArg(s *server.MCPServer) {
	var tools []server.ServerTool
	for _, t := range s.ListTools() {
		props := make(map[string]any, len(t.Tool.InputSchema.Properties)+1)
		for k, v := range t.Tool.InputSchema.Properties {
			props[k] = v
		}
		props[workspaceArg] = map[string]any{"type": "string",
			"description": "A workspace handle (workspace_info, new_workspace) to work in; default: this session's workspace"}
		t.Tool.InputSchema.Properties = props
		tools = append(tools, *t)
	}
	s.SetTools(tools...)
}
