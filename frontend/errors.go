package frontend

import (
	"context"
	"errors"
	"fmt"

	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/internal/telemetry"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// toolError is why a tool call failed: bad input (rejected: nothing was
// done), a code file or run that is not there, a limit, a job that failed,
// or a failure of codexec itself (internal). The helpers of the tools
// return it as an error; it becomes an MCP result in one place per result
// shape: execFailure (execute_code, execute_code_file, get_job_result),
// envFailure (the environment tools), fileFailure and listFailure (the
// code-file tools). Each renders the fields its shape has.
type toolError struct {
	Status  wire.Status
	Message string

	// JobID is the job the failure concerns, if one was sent.
	JobID string
	// Filename is the script or code file concerned.
	Filename string
	// EnvID and Spec are the environment concerned (the environment tools).
	EnvID string
	Spec  *envspec.Spec
	// WorkerID, DurationMS and Output describe a build that ran and
	// failed: where, for how long, and the installer's output.
	WorkerID   string
	DurationMS float64
	Output     string
}

func (e *toolError) Error() string { return e.Message }

// failure returns a toolError of status whose message is format and args.
func failure(status wire.Status, format string, args ...any) *toolError {
	return &toolError{Status: status, Message: fmt.Sprintf(format, args...)}
}

// rejected is the failure for bad input: nothing ran, nothing changed.
func rejected(format string, args ...any) *toolError {
	return failure(wire.StatusRejected, format, args...)
}

// internal is the failure of codexec itself, not of the caller's input or code.
func internal(format string, args ...any) *toolError {
	return failure(wire.StatusInternal, format, args...)
}

// asToolError returns err's toolError; an error of another type (which no
// helper returns) is an internal failure with its text.
func asToolError(err error) *toolError {
	if te, ok := errors.AsType[*toolError](err); ok {
		return te
	}
	return &toolError{Status: wire.StatusInternal, Message: err.Error()}
}

// toolFunc is a tool's work: its result, or the error that execFailure,
// envFailure, fileFailure or listFailure renders.
type toolFunc func(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error)

// handler adapts fn to mcp-go: the call's session scope comes from the
// transport, its progress token (if any) travels in ctx (announceJob), and
// a failure is rendered by render, the renderer of the tool's result shape.
func handler(stdio bool, fn toolFunc, render func(error) *mcp.CallToolResult) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		scope, err := callScope(ctx, stdio)
		var res *mcp.CallToolResult
		if err == nil {
			tctx, span := withTrace(withProgressToken(ctx, req), req)
			res, err = fn(tctx, req, scope)
			telemetry.EndCall(span, err)
		}
		if err != nil {
			return render(err), nil
		}
		return res, nil
	}
}

// execFailure renders a failure of a tool that runs code as a job result
// that never ran (exit code -1), in the shape of ExecResult.
func execFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	return toolResult(&wire.Result{JobID: te.JobID, Status: te.Status, ExitCode: -1, Message: te.Message}, te.Filename)
}

// envFailure renders a failure of an environment tool as an EnvResult.
func envFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	return envToolResult(EnvResult{
		Status: string(te.Status), EnvID: te.EnvID, Spec: te.Spec, JobID: te.JobID, WorkerID: te.WorkerID,
		DurationMS: te.DurationMS, Output: te.Output, Message: te.Message,
	}, "")
}

// fileFailure renders a failure of a code-file tool as a FileResult.
func fileFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	return fileResult(FileResult{Status: string(te.Status), Filename: te.Filename, JobID: te.JobID, Message: te.Message}, "")
}

// listFailure renders a failure of list_code_files as a ListResult.
func listFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	out := mcp.NewToolResultStructured(ListResult{Status: string(te.Status), Files: []FileEntry{}, Runs: []codefiles.RunInfo{}, Message: te.Message},
		statusLine(string(te.Status), te.Message))
	out.IsError = true
	return out
}

// statusLine is the text of a failed code-file tool: "[status: message]".
func statusLine(status, message string) string {
	return "[" + status + ": " + message + "]"
}
