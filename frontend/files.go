package frontend

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// Files of the session's working directory, in and out: upload_file writes
// one, an execution's result links those it made or changed, and
// resources/read of a codexec://workspace/<path> URI reads one, whole or
// in pieces (?offset=&length=). Each is a files job (wire.KindFiles) sent
// to the worker that holds the directory, which resolves the path below it
// without following links. The URI names no session: the caller's own is
// read, so another session's file is as missing as a file never written.

// workspaceURIPrefix starts every URI of a workspace file.
const workspaceURIPrefix = "codexec://workspace/"

// maxUploadBytes is the largest file upload_file writes (the worker holds
// the same bound).
const maxUploadBytes = 16 << 20

// filesTimeout bounds a files job once a worker has it.
const filesTimeout = 30 * time.Second

// UploadResult is the structured content of upload_file.
type UploadResult struct {
	Status  string `json:"status" jsonschema_description:"ok, or why nothing was written: rejected, limit, error, internal"`
	Path    string `json:"path,omitempty" jsonschema_description:"the file, relative to the working directory"`
	URI     string `json:"uri,omitempty" jsonschema_description:"the file's resource URI, for resources/read"`
	Size    int64  `json:"size" jsonschema_description:"bytes written"`
	JobID   string `json:"job_id,omitempty"`
	Message string `json:"message"`
}

func (f *Frontend) registerWorkspaceFiles(s *server.MCPServer, stdio bool) {
	s.AddTool(mcp.NewTool("upload_file",
		mcp.WithDescription("Write a file into this session's working directory, where execute_code's code finds it (open('data/in.csv')). "+
			"Text as is, or binary as base64 (encoding='base64'); an existing file is replaced, missing directories are made. "+
			fmt.Sprintf("At most %d MiB per file, within the session's disk limit. ", maxUploadBytes>>20)+
			"Read files back with resources/read of "+workspaceURIPrefix+"<path> (add ?offset=&length= for a piece of a large one)."),
		mcp.WithString("path", mcp.Required(), mcp.Description("Where to write it, relative to the working directory (no '..', not absolute)")),
		mcp.WithString("content", mcp.Required(), mcp.Description("The file's content: text, or base64 with encoding='base64'")),
		mcp.WithString("encoding", mcp.Enum("text", "base64"), mcp.Description("How content is given; default text")),
		mcp.WithOutputSchema[UploadResult](),
		hints(destructive|idempotent),
	), handler(stdio, f.uploadFile, uploadFailure))

	s.AddResourceTemplate(mcp.NewResourceTemplate(workspaceURIPrefix+"{+path}", "workspace file",
		mcp.WithTemplateDescription("A file of this session's working directory: what upload_file wrote, what a job wrote (execute_code's result links them). "+
			fmt.Sprintf("A read returns at most %d MiB; ?offset=N&length=M reads a piece, and _meta.size says how large the file is.", wire.MaxFileRead>>20)),
	), f.readWorkspaceFile(stdio))
}

func (f *Frontend) uploadFile(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	rel, _ := args["path"].(string)
	content, ok := args["content"].(string)
	if !ok {
		return nil, rejected("argument 'content' is required: the file's text, or base64 with encoding='base64'")
	}
	if err := wire.CheckWorkspacePath(rel); err != nil {
		return nil, rejected("path %q: %v", rel, err)
	}
	var data []byte
	switch enc, _ := args["encoding"].(string); enc {
	case "", "text":
		data = []byte(content)
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(content); err != nil {
			return nil, rejected("content is not valid base64: %v", err)
		}
	default:
		return nil, rejected("encoding %q: give text or base64", enc)
	}
	if len(data) > maxUploadBytes {
		return nil, failure(wire.StatusLimit, "the file is %d bytes, more than the %d MiB a file may have", len(data), maxUploadBytes>>20)
	}
	res, err := f.filesJob(ctx, scope, &wire.FileOp{Op: wire.FileWrite, Path: rel}, base64.StdEncoding.EncodeToString(data))
	if err != nil {
		return nil, err
	}
	uri := workspaceURI(rel)
	out := mcp.NewToolResultStructured(UploadResult{Status: "ok", Path: rel, URI: uri, Size: int64(len(data)), JobID: res.JobID, Message: res.Message},
		fmt.Sprintf("wrote %d bytes to %s (%s)", len(data), rel, uri))
	return out, nil
}

// uploadFailure renders a failed upload.
func uploadFailure(err error) *mcp.CallToolResult {
	te := asToolError(err)
	out := mcp.NewToolResultStructured(UploadResult{Status: string(te.Status), JobID: te.JobID, Message: te.Message},
		fmt.Sprintf("[%s: %s]", te.Status, te.Message))
	out.IsError = true
	return out
}

// filesJob runs a files job for scope and returns its result, a failed
// one as an error.
func (f *Frontend) filesJob(ctx context.Context, scope string, op *wire.FileOp, code string) (*wire.Result, error) {
	now := time.Now().UTC()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindFiles, Pool: f.cfg.Pool, Scope: scope, File: op, Code: code,
		TimeoutMS: filesTimeout.Milliseconds(), EnqueuedAt: now, Deadline: now.Add(filesTimeout + f.cfg.QueueWait),
	}
	res, err := f.dispatchAndAwait(ctx, job)
	if err != nil {
		te := asToolError(err)
		te.JobID = job.ID
		return nil, te
	}
	if res.Status.Failed() {
		return nil, &toolError{Status: res.Status, JobID: job.ID, Message: res.Message}
	}
	return res, nil
}

// readWorkspaceFile answers resources/read of a workspace URI when mcp-go
// serves it. The router answers most such reads itself (readResource), so
// that their errors carry the codes the protocol gives them; mcp-go makes
// any handler's error an internal error (-32603).
func (f *Frontend) readWorkspaceFile(stdio bool) server.ResourceTemplateHandlerFunc {
	return func(ctx context.Context, req mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
		scope, err := callScope(ctx, stdio)
		if err != nil {
			return nil, errors.New(asToolError(err).Message)
		}
		contents, rerr := f.readWorkspace(ctx, stdio, scope, req.Params.URI)
		if rerr != nil {
			return nil, errors.New(rerr.Message)
		}
		return contents, nil
	}
}

// readWorkspace reads the file of a workspace URI for a caller of session
// scope scope: in that scope, in the workspace of its ?workspace= handle,
// or in the batch of its ?batch=. A URI that is no workspace file's, or
// names a handle or batch badly, is invalid params (-32602); a file that
// is not there is resource not found (-32002, the URI in data); anything
// else is internal (-32603).
func (f *Frontend) readWorkspace(ctx context.Context, stdio bool, scope, uri string) ([]mcp.ResourceContents, *rpcError) {
	op, handle, err := parseWorkspaceURI(uri)
	if err != nil {
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: err.Error()}
	}
	if handle != "" {
		scope, err = f.resolveHandle(ctx, ownerFrom(ctx, stdio), handle)
	}
	if bscope, berr := batchURIScope(ctx, stdio, uri); err == nil && (berr != nil || bscope != "") {
		scope, err = bscope, berr
		if handle != "" {
			err = rejected("a workspace URI names a workspace or a batch, not both")
		}
	}
	if err == nil {
		var res *wire.Result
		if res, err = f.filesJob(ctx, scope, op, ""); err == nil {
			var data wire.FileData
			if err := json.Unmarshal(res.Data, &data); err != nil {
				return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: fmt.Sprintf("the worker's answer for job %s is unreadable: %v", res.JobID, err)}
			}
			return []mcp.ResourceContents{fileContents(uri, data)}, nil
		}
	}
	te := asToolError(err)
	switch {
	case te.Status == wire.StatusRejected:
		return nil, &rpcError{Code: mcp.INVALID_PARAMS, Message: te.Message}
	case te.Status == wire.StatusError && strings.HasSuffix(te.Message, wire.NoFile):
		return nil, &rpcError{Code: resourceNotFoundCode(ctx), Message: "Resource not found: " + te.Message, Data: map[string]string{"uri": uri}}
	}
	return nil, &rpcError{Code: mcp.INTERNAL_ERROR, Message: te.Message}
}

// resourceNotFoundCode is the code of a missing resource: -32002 up to
// revision 2025-11-25, invalid params (-32602) from 2026-07-28 on, as
// mcp-go answers for a URI that no resource matches. Over HTTP the
// request's Mcp-Protocol-Version header names the revision.
func resourceNotFoundCode(ctx context.Context) int {
	v, _ := ctx.Value(protocolHeaderKey{}).(string)
	if mcp.IsModernProtocol(v) {
		return mcp.INVALID_PARAMS
	}
	return mcp.RESOURCE_NOT_FOUND
}

// fileContents is a read's answer: text when the bytes are UTF-8 without
// NUL, else a blob; _meta says where in the file they are.
func fileContents(uri string, d wire.FileData) mcp.ResourceContents {
	meta := map[string]any{"size": d.Size, "offset": d.Offset, "length": len(d.Data)}
	mt := mime.TypeByExtension(path.Ext(d.Path))
	if utf8.Valid(d.Data) && !strings.ContainsRune(string(d.Data), 0) {
		if mt == "" {
			mt = "text/plain"
		}
		return mcp.TextResourceContents{URI: uri, MIMEType: mt, Text: string(d.Data), Meta: meta}
	}
	if mt == "" {
		mt = "application/octet-stream"
	}
	return mcp.BlobResourceContents{URI: uri, MIMEType: mt, Blob: base64.StdEncoding.EncodeToString(d.Data), Meta: meta}
}

// parseWorkspaceURI reads a workspace URI: its path (checked as
// CheckWorkspacePath checks any), its offset and length, and the handle of
// the workspace it names (?workspace=; empty: the session's own).
func parseWorkspaceURI(raw string) (*wire.FileOp, string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "codexec" || u.Host != "workspace" || u.User != nil || u.Fragment != "" {
		return nil, "", fmt.Errorf("%q is not a workspace URI (%s<path>)", raw, workspaceURIPrefix)
	}
	rel := strings.TrimPrefix(u.Path, "/")
	if err := wire.CheckWorkspacePath(rel); err != nil {
		return nil, "", fmt.Errorf("%q: %v", raw, err)
	}
	op := &wire.FileOp{Op: wire.FileRead, Path: rel}
	q := u.Query()
	for name, dst := range map[string]*int64{"offset": &op.Offset, "length": &op.Length} {
		if v := q.Get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return nil, "", fmt.Errorf("%q: %s must be a number of bytes, not %q", raw, name, v)
			}
			*dst = n
		}
	}
	return op, q.Get(workspaceArg), nil
}

// workspaceURI is the URI of the file rel of the working directory.
func workspaceURI(rel string) string {
	return (&url.URL{Scheme: "codexec", Host: "workspace", Path: "/" + rel}).String()
}

// addFileLinks links, in an execution's result, the files it made or
// changed.
func addFileLinks(out *mcp.CallToolResult, r *wire.Result) {
	for _, rel := range r.Files {
		mt := mime.TypeByExtension(path.Ext(rel))
		out.Content = append(out.Content, mcp.NewResourceLink(workspaceURI(rel), path.Base(rel), "a file the job wrote: "+rel, mt))
	}
}

// protocolHeaderKey holds, in an HTTP request's context, the protocol
// version its Mcp-Protocol-Version header names.
type protocolHeaderKey struct{}

// resourceLinksSince is the protocol revision that added resource_link
// content to tool results.
const resourceLinksSince = "2025-06-18"

// linksAsText is the tool middleware that, for a client of a protocol
// revision older than resource links (2025-03-26, 2024-11-05), writes
// each resource link of a result as a line of text instead: such a client
// checks every content item against the kinds its revision has, and an
// SDK of that time (the TypeScript SDK up to 1.12) rejects the whole
// result, so every job that wrote a file failed for it. The version is the
// one the request or its session names, or else, over HTTP, the request's
// Mcp-Protocol-Version header (2025-03-26 when it has none).
func linksAsText(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		if res == nil {
			return res, err
		}
		v := server.RequestProtocolVersion(ctx)
		if v == "" {
			v, _ = ctx.Value(protocolHeaderKey{}).(string)
		}
		if v == "" || v >= resourceLinksSince {
			return res, err
		}
		for i, c := range res.Content {
			if l, ok := c.(mcp.ResourceLink); ok {
				res.Content[i] = mcp.NewTextContent(fmt.Sprintf("[file: %s (%s); resources/read reads it]", l.URI, l.Description))
			}
		}
		return res, err
	}
}

// linkWorkspace is the tool middleware that makes the resource links of a
// call made in another workspace (its `workspace` argument, a handle) name
// that workspace (?workspace=<handle>), so that resources/read reads them
// there rather than in the session's own.
func linkWorkspace(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		res, err := next(ctx, req)
		h, _ := req.GetArguments()[workspaceArg].(string)
		if res == nil || h == "" {
			return res, err
		}
		for i, c := range res.Content {
			if l, ok := c.(mcp.ResourceLink); ok && strings.HasPrefix(l.URI, workspaceURIPrefix) {
				l.URI += "?" + url.Values{workspaceArg: {h}}.Encode()
				res.Content[i] = l
			}
		}
		return res, err
	}
}
