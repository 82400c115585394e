package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// The code-file tools. initialize_code_file, append_to_code_file,
// read_code_file and execute_code_file keep the names and parameters of the
// server codexec replaces; list_code_files and delete_code_file are new, and
// read_code_file also reads the code of an earlier run by job_id.

// Statuses of FileResult and ListResult besides those of ExecResult.
const (
	fileStatusOK       = "ok"
	fileStatusNotFound = "not_found"
	fileStatusLimit    = "limit"
)

// FileResult is the structured content of initialize_code_file,
// append_to_code_file, read_code_file and delete_code_file.
type FileResult struct {
	Status   string `json:"status" jsonschema_description:"ok, rejected (bad input, nothing changed), not_found, limit (a size or count limit, nothing changed) or internal"`
	FilePath string `json:"file_path,omitempty" jsonschema_description:"what to pass as file_path to the other code-file tools"`
	Filename string `json:"filename,omitempty" jsonschema_description:"the file's name"`
	Size     int64  `json:"size" jsonschema_description:"the file's size in bytes after the call"`
	// Appended is the number of bytes append_to_code_file added.
	Appended int64 `json:"appended,omitempty"`
	// Replaced says initialize_code_file replaced an existing file of that name.
	Replaced bool `json:"replaced,omitempty"`
	// SHA256 is the hex SHA-256 of what read_code_file read. The content
	// itself is the text content, exactly, and only there: a file may be
	// tens of MiB, and sending it twice would double every read.
	SHA256 string `json:"sha256,omitempty" jsonschema_description:"hex SHA-256 of the content read_code_file returned as its text"`
	// JobID, SourceFile and RanAt describe a run read by job_id.
	JobID      string     `json:"job_id,omitempty"`
	SourceFile string     `json:"source_file,omitempty" jsonschema_description:"the code file a run was read from, if any"`
	RanAt      *time.Time `json:"ran_at,omitempty"`
	Created    *time.Time `json:"created,omitempty"`
	Updated    *time.Time `json:"updated,omitempty"`
	Message    string     `json:"message" jsonschema_description:"one-line status"`
}

// ListResult is the structured content of list_code_files.
type ListResult struct {
	Status       string      `json:"status"`
	Files        []FileEntry `json:"files"`
	Runs         []RunEntry  `json:"runs" jsonschema_description:"recent runs, newest first"`
	TotalRuns    int         `json:"total_runs" jsonschema_description:"runs kept for this session, of which runs lists the newest"`
	MaxFileBytes int64       `json:"max_file_bytes"`
	MaxFiles     int         `json:"max_files"`
	Message      string      `json:"message"`
}

// FileEntry is one code file in ListResult.
type FileEntry struct {
	FilePath string    `json:"file_path"`
	Filename string    `json:"filename"`
	Size     int64     `json:"size"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

// RunEntry is one recorded run in ListResult.
type RunEntry struct {
	JobID      string    `json:"job_id"`
	Filename   string    `json:"filename"`
	SourceFile string    `json:"source_file,omitempty"`
	Size       int64     `json:"size"`
	Time       time.Time `json:"time"`
}

const (
	defaultListRuns = 20
	filePathHelp    = "The file_path initialize_code_file returned, or the bare file name (e.g. 'main.py')"
)

func (f *Frontend) registerFileTools(s *server.MCPServer, stdio bool) {
	limits := fmt.Sprintf("A file may grow to %s; a session may hold %d files.", formatSize(f.cfg.MaxFileBytes), f.cfg.MaxFiles)
	s.AddTool(mcp.NewTool("initialize_code_file",
		mcp.WithDescription("Start a code file with its first piece of content; add more with append_to_code_file, run it with execute_code_file. "+
			"An existing file of the same name is replaced (the result says so). Returns the file_path the other tools take. "+limits),
		mcp.WithString("content", mcp.Required(), mcp.Description("The first piece of the file (may be empty)")),
		mcp.WithString("filename", mcp.Description("Name for the file (sanitized to letters, digits, '.', '_', '-'; '.py' added). Default: a new unique name")),
		mcp.WithOutputSchema[FileResult](),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return f.initializeCodeFile(ctx, req, scopeFrom(ctx, stdio)), nil
	})

	s.AddTool(mcp.NewTool("append_to_code_file",
		mcp.WithDescription("Append content to the end of a code file. Pieces are stored as sent: include the newlines you want. "+limits),
		mcp.WithString("file_path", mcp.Required(), mcp.Description(filePathHelp)),
		mcp.WithString("content", mcp.Required(), mcp.Description("The text to append")),
		mcp.WithOutputSchema[FileResult](),
		mcp.WithDestructiveHintAnnotation(false),
		mcp.WithOpenWorldHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return f.appendToCodeFile(ctx, req, scopeFrom(ctx, stdio)), nil
	})

	s.AddTool(mcp.NewTool("read_code_file",
		mcp.WithDescription("Read a code file of this session exactly as stored, or, with job_id, the code an earlier run ran (see list_code_files). "+
			"The text content is the file itself."),
		mcp.WithString("file_path", mcp.Description(filePathHelp+". Give this or job_id")),
		mcp.WithString("job_id", mcp.Description("Read the code of this earlier run instead (execute_code or execute_code_file)")),
		mcp.WithOutputSchema[FileResult](),
		mcp.WithReadOnlyHintAnnotation(true),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return f.readCodeFile(ctx, req, scopeFrom(ctx, stdio)), nil
	})

	s.AddTool(mcp.NewTool("execute_code_file",
		mcp.WithDescription("Run a code file's current content exactly as execute_code would run it: fresh interpreter, this session's environment and working directory. "+
			"Returns stdout, stderr, the exit code and status; isError is true when the code raised, exited non-zero, timed out or hit a limit. "+
			"Takes the same timeout_seconds and limits as execute_code."),
		mcp.WithString("file_path", mcp.Required(), mcp.Description(filePathHelp)),
		f.runOptions(),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return f.executeCodeFile(ctx, req, scopeFrom(ctx, stdio)), nil
	})

	s.AddTool(mcp.NewTool("list_code_files",
		mcp.WithDescription("List this session's code files (name, size, file_path) and its most recent runs (job_id, file name, size, time); "+
			"read_code_file reads either."),
		mcp.WithNumber("max_runs", mcp.Description(fmt.Sprintf("How many recent runs to list (default %d, 0 for none, at most %d)", defaultListRuns, f.cfg.RunHistory))),
		mcp.WithOutputSchema[ListResult](),
		mcp.WithReadOnlyHintAnnotation(true),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return f.listCodeFiles(ctx, req, scopeFrom(ctx, stdio)), nil
	})

	s.AddTool(mcp.NewTool("delete_code_file",
		mcp.WithDescription("Delete a code file of this session. Runs already recorded keep their code."),
		mcp.WithString("file_path", mcp.Required(), mcp.Description(filePathHelp)),
		mcp.WithOutputSchema[FileResult](),
		mcp.WithDestructiveHintAnnotation(true),
		mcp.WithOpenWorldHintAnnotation(false),
	), func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return f.deleteCodeFile(ctx, req, scopeFrom(ctx, stdio)), nil
	})
}

// filePath is what the tools hand out as file_path for name of scope: the
// on-disk copy in `codexec dev`, the codexec:// pseudo-path otherwise.
func (f *Frontend) filePath(scope, name string) string {
	if p := f.files.mirrorPath(scope, name); p != "" {
		return p
	}
	return FilesURIPrefix + name
}

// fileArg resolves the file_path argument to a file name of scope.
func (f *Frontend) fileArg(args map[string]any, scope string) (string, string, bool) {
	v, present := args["file_path"]
	if !present || v == nil {
		return "", "missing required argument 'file_path' (" + strings.ToLower(filePathHelp[:1]) + filePathHelp[1:] + ")", false
	}
	p, ok := v.(string)
	if !ok {
		return "", "argument 'file_path' must be a string", false
	}
	name, err := resolveFilePath(p, mirrorPrefix(f.cfg.FilesMirrorDir, scope))
	if err != nil {
		return "", err.Error(), false
	}
	return name, "", true
}

// contentArg reads the required string argument content.
func contentArg(args map[string]any) (string, string, bool) {
	v, present := args["content"]
	if !present || v == nil {
		return "", "missing required argument 'content' (a string)", false
	}
	s, ok := v.(string)
	if !ok {
		return "", "argument 'content' must be a string", false
	}
	return s, "", true
}

func (f *Frontend) initializeCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) *mcp.CallToolResult {
	args := req.GetArguments()
	content, msg, ok := contentArg(args)
	if !ok {
		return fileRejected(msg)
	}
	given, bad := optionalString(args, "filename")
	if bad != nil {
		return fileRejected("argument 'filename' must be a string")
	}
	var name string
	if strings.TrimSpace(given) == "" {
		// A new unique name, so that calls without a name never replace a file.
		name = "code_" + strings.ToLower(ulid.Make().String()) + ".py"
	} else {
		name = wire.CleanFilename(given)
	}
	info, replaced, oldSize, err := f.files.Init(ctx, scope, name, content)
	if err != nil {
		return f.fileError(err, name)
	}
	r := f.fileInfoResult(scope, info)
	r.Replaced = replaced
	var b strings.Builder
	if replaced {
		fmt.Fprintf(&b, "Replaced the existing code file %s (%d bytes) with %d bytes", name, oldSize, info.Size)
	} else {
		fmt.Fprintf(&b, "Created code file %s (%d bytes)", name, info.Size)
	}
	fmt.Fprintf(&b, "; file_path: %s", r.FilePath)
	if given != "" && strings.TrimSpace(given) != name {
		fmt.Fprintf(&b, " (the name %q was cleaned to %q)", given, name)
	}
	if info.Warning != "" {
		fmt.Fprintf(&b, "; warning: %s", info.Warning)
	}
	r.Message = b.String()
	return fileResult(r, r.Message)
}

func (f *Frontend) appendToCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) *mcp.CallToolResult {
	args := req.GetArguments()
	name, msg, ok := f.fileArg(args, scope)
	if !ok {
		return fileRejected(msg)
	}
	content, msg, ok := contentArg(args)
	if !ok {
		return fileRejected(msg)
	}
	info, err := f.files.Append(ctx, scope, name, content)
	if err != nil {
		return f.fileError(err, name)
	}
	r := f.fileInfoResult(scope, info)
	r.Appended = int64(len(content))
	r.Message = fmt.Sprintf("Appended %d bytes to %s; it now has %d bytes", len(content), name, info.Size)
	if info.Warning != "" {
		r.Message += "; warning: " + info.Warning
	}
	return fileResult(r, r.Message)
}

func (f *Frontend) readCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) *mcp.CallToolResult {
	args := req.GetArguments()
	jobID, bad := optionalString(args, "job_id")
	if bad != nil {
		return fileRejected("argument 'job_id' must be a string")
	}
	if jobID != "" {
		if v, present := args["file_path"]; present && v != nil && v != "" {
			return fileRejected("give file_path or job_id, not both")
		}
		return f.readRun(ctx, scope, jobID)
	}
	name, msg, ok := f.fileArg(args, scope)
	if !ok {
		return fileRejected(msg)
	}
	content, info, err := f.files.Read(ctx, scope, name)
	if err != nil {
		return f.fileError(err, name)
	}
	r := f.fileInfoResult(scope, info)
	r.SHA256 = hexSHA256(content)
	r.Message = fmt.Sprintf("%s: %d bytes", name, info.Size)
	return fileContent(r, content)
}

func (f *Frontend) readRun(ctx context.Context, scope, jobID string) *mcp.CallToolResult {
	code, run, err := f.files.ReadRun(ctx, scope, jobID)
	if errors.Is(err, ErrRunNotFound) {
		return fileResult(FileResult{Status: fileStatusNotFound, JobID: jobID, Message: fmt.Sprintf(
			"no recorded run %q in this session: list_code_files lists the recent ones (runs are kept for %s, at most %d per session)",
			jobID, f.cfg.RunRetention, f.cfg.RunHistory)}, "")
	}
	if err != nil {
		return fileResult(FileResult{Status: string(wire.StatusInternal), JobID: jobID, Message: "reading the run failed: " + err.Error()}, "")
	}
	ranAt := run.Time
	r := FileResult{
		Status: fileStatusOK, JobID: run.JobID, Filename: run.Filename, SourceFile: run.SourceFile,
		Size: int64(len(code)), SHA256: hexSHA256(code), RanAt: &ranAt,
		Message: fmt.Sprintf("code of job %s (%s, %d bytes)", run.JobID, run.Filename, len(code)),
	}
	return fileContent(r, code)
}

func (f *Frontend) executeCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) *mcp.CallToolResult {
	args := req.GetArguments()
	name, msg, ok := f.fileArg(args, scope)
	if !ok {
		return rejected("%s", msg)
	}
	run, bad := f.runArgs(args)
	if bad != nil {
		return bad
	}
	code, _, err := f.files.Read(ctx, scope, name)
	switch {
	case errors.Is(err, ErrFileNotFound):
		return rejected("%s", notFoundMessage(name))
	case err != nil:
		return internal("reading code file %s failed: %v", name, err)
	case strings.TrimSpace(code) == "":
		return rejected("code file %s is empty: nothing to run", name)
	}
	return f.runCode(ctx, scope, code, name, name, run)
}

func (f *Frontend) listCodeFiles(ctx context.Context, req mcp.CallToolRequest, scope string) *mcp.CallToolResult {
	maxRuns := defaultListRuns
	if v, present := req.GetArguments()["max_runs"]; present && v != nil {
		n, ok := v.(float64)
		if !ok || math.IsNaN(n) || n < 0 || n != math.Trunc(n) {
			return listFailed(string(wire.StatusRejected), "argument 'max_runs' must be a whole number, 0 or more")
		}
		maxRuns = int(min(n, float64(f.cfg.RunHistory)))
	}
	files, err := f.files.List(ctx, scope)
	if err != nil {
		return listFailed(string(wire.StatusInternal), "listing code files failed: "+err.Error())
	}
	runs, err := f.files.Runs(ctx, scope)
	if err != nil {
		return listFailed(string(wire.StatusInternal), "listing runs failed: "+err.Error())
	}
	out := ListResult{
		Status: fileStatusOK, Files: []FileEntry{}, Runs: []RunEntry{}, TotalRuns: len(runs),
		MaxFileBytes: f.cfg.MaxFileBytes, MaxFiles: f.cfg.MaxFiles,
	}
	var b strings.Builder
	fmt.Fprintf(&b, "code files: %d (at most %d, each up to %s)\n", len(files), f.cfg.MaxFiles, formatSize(f.cfg.MaxFileBytes))
	for _, fi := range files {
		e := FileEntry{FilePath: f.filePath(scope, fi.Name), Filename: fi.Name, Size: fi.Size, Created: fi.Created, Updated: fi.Updated}
		out.Files = append(out.Files, e)
		fmt.Fprintf(&b, "  %s  %d bytes  updated %s  file_path: %s\n", e.Filename, e.Size, e.Updated.Format(time.RFC3339), e.FilePath)
	}
	shown := runs[:min(maxRuns, len(runs))]
	switch {
	case len(runs) == 0:
		b.WriteString("no runs recorded\n")
	case len(shown) < len(runs):
		fmt.Fprintf(&b, "%d runs recorded; the newest %d:\n", len(runs), len(shown))
	default:
		fmt.Fprintf(&b, "%d runs recorded, newest first:\n", len(runs))
	}
	for _, r := range shown {
		out.Runs = append(out.Runs, RunEntry(r))
		from := ""
		if r.SourceFile != "" {
			from = " from code file " + r.SourceFile
		}
		fmt.Fprintf(&b, "  %s  %s  %d bytes  %s%s\n", r.JobID, r.Filename, r.Size, r.Time.Format(time.RFC3339), from)
	}
	b.WriteString("read_code_file reads a file (file_path) or the code of a run (job_id).")
	out.Message = fmt.Sprintf("code files: %d, runs: %d", len(files), len(runs))
	return mcp.NewToolResultStructured(out, b.String())
}

func (f *Frontend) deleteCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) *mcp.CallToolResult {
	name, msg, ok := f.fileArg(req.GetArguments(), scope)
	if !ok {
		return fileRejected(msg)
	}
	size, err := f.files.Delete(ctx, scope, name)
	if err != nil {
		return f.fileError(err, name)
	}
	r := FileResult{Status: fileStatusOK, FilePath: f.filePath(scope, name), Filename: name, Size: 0,
		Message: fmt.Sprintf("Deleted code file %s (%d bytes)", name, size)}
	return fileResult(r, r.Message)
}

func (f *Frontend) fileInfoResult(scope string, info FileInfo) FileResult {
	r := FileResult{Status: fileStatusOK, FilePath: f.filePath(scope, info.Name), Filename: info.Name, Size: info.Size}
	if !info.Created.IsZero() {
		r.Created = &info.Created
	}
	if !info.Updated.IsZero() {
		r.Updated = &info.Updated
	}
	return r
}

// fileError renders a CodeStore error for file name.
func (f *Frontend) fileError(err error, name string) *mcp.CallToolResult {
	r := FileResult{Filename: name, Message: err.Error()}
	switch {
	case errors.Is(err, ErrFileNotFound):
		r.Status, r.Message = fileStatusNotFound, notFoundMessage(name)
	case errors.Is(err, ErrFileTooLarge), errors.Is(err, ErrTooManyFiles):
		r.Status = fileStatusLimit
	default:
		f.log.Error("code-file store", "file", name, "err", err)
		r.Status, r.Message = string(wire.StatusInternal), "the code-file store failed: "+err.Error()
	}
	return fileResult(r, "")
}

func notFoundMessage(name string) string {
	return fmt.Sprintf("no code file %q in this session: list_code_files lists them, initialize_code_file creates one", name)
}

func fileRejected(msg string) *mcp.CallToolResult {
	return fileResult(FileResult{Status: string(wire.StatusRejected), Message: msg}, "")
}

// fileResult renders r; text is the text content, or the status line when
// empty. isError is true exactly when r.Status is not ok.
func fileResult(r FileResult, text string) *mcp.CallToolResult {
	if text == "" {
		text = fmt.Sprintf("[%s: %s]", r.Status, r.Message)
	}
	out := mcp.NewToolResultStructured(r, text)
	out.IsError = r.Status != fileStatusOK
	return out
}

// fileContent renders a successful read: the text content is content,
// exactly (even when empty).
func fileContent(r FileResult, content string) *mcp.CallToolResult {
	return mcp.NewToolResultStructured(r, content)
}

func hexSHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func listFailed(status, msg string) *mcp.CallToolResult {
	out := mcp.NewToolResultStructured(ListResult{Status: status, Files: []FileEntry{}, Runs: []RunEntry{}, Message: msg}, "["+status+": "+msg+"]")
	out.IsError = true
	return out
}

// formatSize prints n bytes the way the configuration does ("32 MiB").
func formatSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
