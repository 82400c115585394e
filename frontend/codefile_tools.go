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
	"unicode/utf8"

	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/internal/units"
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
	// It is of the whole file (or run's code) also when a read returns a
	// piece, so that a client that read it in parts checks what it put
	// together.
	SHA256 string `json:"sha256,omitempty" jsonschema_description:"hex SHA-256 of the whole file (or run's code) read_code_file read, also when its text is a piece"`
	// Offset, Length and More place the text read_code_file returned: bytes
	// [offset, offset+length) of size; more says that bytes follow.
	Offset int64 `json:"offset,omitempty" jsonschema_description:"read_code_file: where the text content starts in the file, in bytes (absent: 0)"`
	Length int64 `json:"length,omitempty" jsonschema_description:"read_code_file: how many bytes of the file the text content holds (absent: 0)"`
	More   bool  `json:"more,omitempty" jsonschema_description:"read_code_file: true when the file goes on after this piece; read on from offset+length"`
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
	Status       string              `json:"status"`
	Files        []FileEntry         `json:"files"`
	Runs         []codefiles.RunInfo `json:"runs" jsonschema_description:"recent runs, newest first"`
	TotalRuns    int                 `json:"total_runs" jsonschema_description:"runs kept for this session, of which runs lists the newest"`
	MaxFileBytes int64               `json:"max_file_bytes"`
	MaxFiles     int                 `json:"max_files"`
	Message      string              `json:"message"`
}

// FileEntry is one code file in ListResult.
type FileEntry struct {
	FilePath string    `json:"file_path"`
	Filename string    `json:"filename"`
	Size     int64     `json:"size"`
	Created  time.Time `json:"created"`
	Updated  time.Time `json:"updated"`
}

const (
	defaultListRuns = 20
	filePathHelp    = "The file_path initialize_code_file returned, or the bare file name (e.g. 'main.py')"
)

func (f *Frontend) registerFileTools(s *server.MCPServer, stdio bool) {
	cf := f.cfg.CodeFiles
	limits := fmt.Sprintf("A file may grow to %s; a session may hold %d files, and %s in all (its files plus the code of its recent runs).",
		formatSize(cf.MaxFileBytes), cf.MaxFiles, formatSize(cf.MaxSessionBytes))
	s.AddTool(mcp.NewTool("initialize_code_file",
		mcp.WithDescription("Start a code file with its first piece of content; add more with append_to_code_file, run it with execute_code_file. "+
			"An existing file of the same name is replaced (the result says so). Returns the file_path the other tools take. "+limits),
		mcp.WithString("content", mcp.Required(), mcp.Description("The first piece of the file (may be empty)")),
		mcp.WithString("filename", mcp.Description("Name for the file (sanitized to letters, digits, '.', '_', '-'; '.py' added). Default: a new unique name")),
		mcp.WithOutputSchema[FileResult](),
		hints(destructive), // without filename, each call makes another file
	), handler(stdio, f.initializeCodeFile, fileFailure))

	s.AddTool(mcp.NewTool("append_to_code_file",
		mcp.WithDescription("Append content to the end of a code file. Pieces are stored as sent: include the newlines you want. "+limits),
		mcp.WithString("file_path", mcp.Required(), mcp.Description(filePathHelp)),
		mcp.WithString("content", mcp.Required(), mcp.Description("The text to append")),
		mcp.WithOutputSchema[FileResult](),
		hints(0),
	), handler(stdio, f.appendToCodeFile, fileFailure))

	readDesc := "Read a code file of this session exactly as stored, or, with job_id, the code an earlier run ran (see list_code_files). " +
		"The text content is the file itself, or with offset and length the piece of it they name (size says how large the file is, " +
		"more whether it goes on: read on from offset+length until more is false; sha256 is the whole file's)."
	if stdio {
		readDesc += fmt.Sprintf(" On stdio one message carries at most %s: a larger file must be read in parts (length %d, say).",
			formatSize(StdioMessageLimit), stdioReadPart)
	}
	s.AddTool(mcp.NewTool("read_code_file",
		mcp.WithDescription(readDesc),
		mcp.WithString("file_path", mcp.Description(filePathHelp+". Give this or job_id")),
		mcp.WithString("job_id", mcp.Description("Read the code of this earlier run instead (execute_code or execute_code_file)")),
		mcp.WithNumber("offset", mcp.Description("Where to start reading, in bytes from the start (default 0); at a character's start, as offset+length of a previous read is")),
		mcp.WithNumber("length", mcp.Description("How many bytes to read at most (default: to the end). A piece ends on a whole character, so it may hold a few bytes less")),
		mcp.WithOutputSchema[FileResult](),
		hints(readOnly),
	), handler(stdio, f.readCodeFile(stdio), fileFailure))

	s.AddTool(mcp.NewTool("execute_code_file",
		mcp.WithDescription("Run a code file's current content exactly as execute_code would run it: fresh interpreter, this session's environment and working directory. "+
			"Returns stdout, stderr, the exit code and status; isError is true when the code raised, exited non-zero, timed out or hit a limit. "+
			"Takes the same timeout_seconds and limits as execute_code."),
		mcp.WithString("file_path", mcp.Required(), mcp.Description(filePathHelp)),
		f.runOptions(),
	), handler(stdio, f.executeCodeFile, execFailure))

	s.AddTool(mcp.NewTool("list_code_files",
		mcp.WithDescription("List this session's code files (name, size, file_path) and its most recent runs (job_id, file name, size, time); "+
			"read_code_file reads either."),
		mcp.WithNumber("max_runs", mcp.Description(fmt.Sprintf("How many recent runs to list (default %d, 0 for none, at most %d)", defaultListRuns, cf.RunHistory))),
		mcp.WithOutputSchema[ListResult](),
		hints(readOnly),
	), handler(stdio, f.listCodeFiles, listFailure))

	s.AddTool(mcp.NewTool("delete_code_file",
		mcp.WithDescription("Delete a code file of this session. Runs already recorded keep their code."),
		mcp.WithString("file_path", mcp.Required(), mcp.Description(filePathHelp)),
		mcp.WithOutputSchema[FileResult](),
		hints(destructive|idempotent),
	), handler(stdio, f.deleteCodeFile, fileFailure))
}

// fileArg resolves the file_path argument to a file name of scope.
func (f *Frontend) fileArg(args map[string]any, scope string) (string, error) {
	v, present := args["file_path"]
	if !present || v == nil {
		return "", rejected("missing required argument 'file_path' (%s)", strings.ToLower(filePathHelp[:1])+filePathHelp[1:])
	}
	p, ok := v.(string)
	if !ok {
		return "", rejected("argument 'file_path' must be a string")
	}
	name, err := f.files.Resolve(scope, p)
	if err != nil {
		return "", rejected("%s", err)
	}
	return name, nil
}

// contentArg reads the required string argument content.
func contentArg(args map[string]any) (string, error) {
	v, present := args["content"]
	if !present || v == nil {
		return "", rejected("missing required argument 'content' (a string)")
	}
	s, ok := v.(string)
	if !ok {
		return "", rejected("argument 'content' must be a string")
	}
	return s, nil
}

func (f *Frontend) initializeCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	content, err := contentArg(args)
	if err != nil {
		return nil, err
	}
	given, err := optionalString(args, "filename")
	if err != nil {
		return nil, err
	}
	var name string
	if strings.TrimSpace(given) == "" {
		// A new unique name, so that calls without a name never replace a file.
		name = "code_" + strings.ToLower(ulid.Make().String()) + ".py"
	} else {
		name = wire.CleanFilename(given)
	}
	info, replaced, oldSize, err := f.codeFilesOf(ctx).Init(ctx, scope, name, content)
	if err != nil {
		return nil, f.storeError(codeBytesRefused(ctx, err), name)
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
	return fileResult(r, r.Message), nil
}

func (f *Frontend) appendToCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	name, err := f.fileArg(args, scope)
	if err != nil {
		return nil, err
	}
	content, err := contentArg(args)
	if err != nil {
		return nil, err
	}
	info, err := f.codeFilesOf(ctx).Append(ctx, scope, name, content)
	if err != nil {
		return nil, f.storeError(codeBytesRefused(ctx, err), name)
	}
	r := f.fileInfoResult(scope, info)
	r.Appended = int64(len(content))
	r.Message = fmt.Sprintf("Appended %d bytes to %s; it now has %d bytes", len(content), name, info.Size)
	if info.Warning != "" {
		r.Message += "; warning: " + info.Warning
	}
	return fileResult(r, r.Message), nil
}

// readCodeFile is read_code_file; stdio says whether its answer goes
// out on stdio, where a message has a limit (readPiece).
func (f *Frontend) readCodeFile(stdio bool) toolFunc {
	return func(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
		args := req.GetArguments()
		jobID, err := optionalString(args, "job_id")
		if err != nil {
			return nil, err
		}
		part, err := readPartArgs(args)
		if err != nil {
			return nil, err
		}
		if jobID != "" {
			if v, present := args["file_path"]; present && v != nil && v != "" {
				return nil, rejected("give file_path or job_id, not both")
			}
			return f.readRun(ctx, scope, jobID, part, stdio)
		}
		if args["job_id"] != nil && args["file_path"] == nil {
			return nil, rejected("argument 'job_id' is empty: give the job_id of a run (list_code_files lists them), or file_path")
		}
		if args["job_id"] == nil && args["file_path"] == nil {
			return nil, rejected("missing argument: give file_path to read a code file (%s), or job_id to read the code an earlier run ran (list_code_files lists both)",
				strings.ToLower(filePathHelp[:1])+filePathHelp[1:])
		}
		name, err := f.fileArg(args, scope)
		if err != nil {
			return nil, err
		}
		content, info, err := f.files.Read(ctx, scope, name)
		if err != nil {
			return nil, f.storeError(err, name)
		}
		r := f.fileInfoResult(scope, info)
		r.SHA256 = hexSHA256(content)
		r.Message = fmt.Sprintf("%s: %d bytes", name, info.Size)
		return readPiece(r, name, content, part, stdio)
	}
}

// readPart is the piece of a file a read_code_file asks for.
type readPart struct {
	offset, length int64 // length 0: to the end
	// inParts says offset or length was given: the client reads the file
	// in parts, and takes a shorter piece than it asked for (more says
	// so) rather than an error.
	inParts bool
}

// readPartArgs reads offset and length.
func readPartArgs(args map[string]any) (readPart, error) {
	var p readPart
	for _, a := range []struct {
		name string
		dst  *int64
		min  float64
	}{{"offset", &p.offset, 0}, {"length", &p.length, 1}} {
		v, present := args[a.name]
		if !present || v == nil {
			continue
		}
		n, ok := v.(float64)
		if !ok || math.IsNaN(n) || n < a.min || n != math.Trunc(n) || n > 1<<53 {
			return p, rejected("argument '%s' must be a whole number of bytes, %g or more", a.name, a.min)
		}
		*a.dst, p.inParts = int64(n), true
	}
	return p, nil
}

// stdioReadPart is the length of a part read_code_file suggests for
// reading a file too large for one stdio message.
const stdioReadPart = 4 << 20

// stdioTextBudget is the most bytes a read's text may take in a stdio
// message, escaped as JSON: StdioMessageLimit less room for the rest of
// the message (its structured content is a few hundred bytes).
const stdioTextBudget = StdioMessageLimit - 64<<10

// readPiece is read_code_file's answer: r with the piece of content that
// part names as its text, placed by offset, length and more. A piece ends
// on a whole UTF-8 character (text content must be valid text). On stdio
// a piece is cut to what one message carries; a read of the whole file
// that does not fit is refused instead, saying to read it in parts: a
// client that asked for all of it must not take the start for the whole.
func readPiece(r FileResult, name, content string, part readPart, stdio bool) (*mcp.CallToolResult, error) {
	size := int64(len(content))
	start := min(part.offset, size)
	if start < size && !utf8.RuneStart(content[start]) {
		return nil, rejected("offset %d falls inside a character of %s: start at 0, or at the offset+length a previous read returned", part.offset, name)
	}
	end := size
	if part.length > 0 {
		end = min(size, start+part.length)
	}
	if stdio {
		if fit := start + int64(jsonTextFit(content[start:end], stdioTextBudget)); fit < end {
			if !part.inParts {
				r.Status = fileStatusLimit
				r.Message = fmt.Sprintf("%s is %d bytes (%.1f MiB), more than one message carries on stdio (%s as JSON; a client would drop the connection), "+
					"so it is not sent whole: read it in parts, with offset 0 and length %d, then offset+length of each reply as the next offset, until more is false",
					name, size, float64(size)/(1<<20), formatSize(StdioMessageLimit), stdioReadPart)
				r.SHA256 = ""
				res := mcp.NewToolResultStructured(r, r.Message)
				res.IsError = true
				return res, nil
			}
			end = fit
		}
	}
	for end > start && end < size && !utf8.RuneStart(content[end]) {
		end--
	}
	if end == start && start < size {
		_, n := utf8.DecodeRuneInString(content[start:]) // asked for less than one character
		end = start + int64(n)
	}
	r.Offset, r.Length, r.More = start, end-start, end < size
	if part.inParts {
		r.Message += fmt.Sprintf("; bytes %d to %d", start, end)
		if r.More {
			r.Message += fmt.Sprintf(", more from offset %d", end)
		}
	}
	return fileContent(r, content[start:end]), nil
}

// jsonTextFit is how many bytes of s, from its start, fit in budget bytes
// once escaped as a JSON string is by encoding/json (with HTML escaping,
// as mcp-go writes it): at least that many, counting an invalid byte as
// its replacement's escape.
func jsonTextFit(s string, budget int) int {
	used := 2 // the quotes
	for i := 0; i < len(s); {
		w, n := jsonWidth(s, i)
		if used+w > budget {
			return i
		}
		used += w
		i += n
	}
	return len(s)
}

// jsonLen is how many bytes s takes as a JSON string, as jsonTextFit
// counts them, the quotes left out.
func jsonLen(s string) int {
	used := 0
	for i := 0; i < len(s); {
		w, n := jsonWidth(s, i)
		used += w
		i += n
	}
	return used
}

// jsonWidth is how many bytes the character of s at i takes in a JSON
// string (w) and in s (n).
func jsonWidth(s string, i int) (w, n int) {
	c := s[i]
	switch {
	case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
		return 2, 1
	case c < 0x20 || c == '<' || c == '>' || c == '&':
		return 6, 1
	case c >= utf8.RuneSelf:
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r == '\u2028' || r == '\u2029' {
			return 6, n
		}
		return n, n
	}
	return 1, 1
}

func (f *Frontend) readRun(ctx context.Context, scope, jobID string, part readPart, stdio bool) (*mcp.CallToolResult, error) {
	code, run, err := f.files.ReadRun(ctx, scope, jobID)
	if errors.Is(err, codefiles.ErrRunNotFound) {
		te := failure(fileStatusNotFound,
			"no recorded run %q in this session: list_code_files lists the recent ones (runs are kept for %s, at most %d per session)",
			jobID, f.cfg.CodeFiles.RunRetention, f.cfg.CodeFiles.RunHistory)
		te.JobID = jobID
		return nil, te
	}
	if err != nil {
		te := internal("reading the run failed: %v", err)
		te.JobID = jobID
		return nil, te
	}
	ranAt := run.Time
	r := FileResult{
		Status: fileStatusOK, JobID: run.JobID, Filename: run.Filename, SourceFile: run.SourceFile,
		Size: int64(len(code)), SHA256: hexSHA256(code), RanAt: &ranAt,
		Message: fmt.Sprintf("code of job %s (%s, %d bytes)", run.JobID, run.Filename, len(code)),
	}
	return readPiece(r, "the code of job "+run.JobID, code, part, stdio)
}

func (f *Frontend) executeCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	name, err := f.fileArg(args, scope)
	if err != nil {
		return nil, err
	}
	run, err := f.runArgs(args)
	if err != nil {
		return nil, err
	}
	code, _, err := f.files.Read(ctx, scope, name)
	switch {
	case errors.Is(err, codefiles.ErrFileNotFound):
		return nil, rejected("%s", notFoundMessage(name))
	case err != nil:
		return nil, internal("reading code file %s failed: %v", name, err)
	case strings.TrimSpace(code) == "":
		return nil, rejected("code file %s is empty: nothing to run", name)
	}
	return f.runCode(ctx, scope, code, name, name, run)
}

func (f *Frontend) listCodeFiles(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	cf := f.cfg.CodeFiles
	maxRuns := defaultListRuns
	if v, present := req.GetArguments()["max_runs"]; present && v != nil {
		n, ok := v.(float64)
		if !ok || math.IsNaN(n) || n < 0 || n != math.Trunc(n) {
			return nil, rejected("argument 'max_runs' must be a whole number, 0 or more")
		}
		maxRuns = int(min(n, float64(cf.RunHistory)))
	}
	files, err := f.files.List(ctx, scope)
	if err != nil {
		return nil, internal("listing code files failed: %v", err)
	}
	runs, err := f.files.Runs(ctx, scope)
	if err != nil {
		return nil, internal("listing runs failed: %v", err)
	}
	out := ListResult{
		Status: fileStatusOK, Files: []FileEntry{}, Runs: []codefiles.RunInfo{}, TotalRuns: len(runs),
		MaxFileBytes: cf.MaxFileBytes, MaxFiles: cf.MaxFiles,
	}
	var b strings.Builder
	fmt.Fprintf(&b, "code files: %d (at most %d, each up to %s)\n", len(files), cf.MaxFiles, formatSize(cf.MaxFileBytes))
	for _, fi := range files {
		e := FileEntry{FilePath: f.files.FilePath(scope, fi.Name), Filename: fi.Name, Size: fi.Size, Created: fi.Created, Updated: fi.Updated}
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
		out.Runs = append(out.Runs, r)
		from := ""
		if r.SourceFile != "" {
			from = " from code file " + r.SourceFile
		}
		fmt.Fprintf(&b, "  %s  %s  %d bytes  %s%s\n", r.JobID, r.Filename, r.Size, r.Time.Format(time.RFC3339), from)
	}
	b.WriteString("read_code_file reads a file (file_path) or the code of a run (job_id).")
	out.Message = fmt.Sprintf("code files: %d, runs: %d", len(files), len(runs))
	return mcp.NewToolResultStructured(out, b.String()), nil
}

func (f *Frontend) deleteCodeFile(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	name, err := f.fileArg(req.GetArguments(), scope)
	if err != nil {
		return nil, err
	}
	size, err := f.codeFilesOf(ctx).Delete(ctx, scope, name)
	if err != nil {
		return nil, f.storeError(err, name)
	}
	r := FileResult{Status: fileStatusOK, FilePath: f.files.FilePath(scope, name), Filename: name, Size: 0,
		Message: fmt.Sprintf("Deleted code file %s (%d bytes)", name, size)}
	return fileResult(r, r.Message), nil
}

func (f *Frontend) fileInfoResult(scope string, info codefiles.FileInfo) FileResult {
	r := FileResult{Status: fileStatusOK, FilePath: f.files.FilePath(scope, info.Name), Filename: info.Name, Size: info.Size}
	if !info.Created.IsZero() {
		r.Created = &info.Created
	}
	if !info.Updated.IsZero() {
		r.Updated = &info.Updated
	}
	return r
}

// storeError is the toolError of a CodeStore error for file name: the file
// is not there, a limit refused the write, or the store failed.
func (f *Frontend) storeError(err error, name string) error {
	var te *toolError
	switch {
	case errors.As(err, &te): // a quota's refusal
	case errors.Is(err, codefiles.ErrFileNotFound):
		te = failure(fileStatusNotFound, "%s", notFoundMessage(name))
	case errors.Is(err, codefiles.ErrFileTooLarge), errors.Is(err, codefiles.ErrTooManyFiles), errors.Is(err, codefiles.ErrStorageFull):
		te = failure(fileStatusLimit, "%s", err)
	default:
		f.log.Error("code-file store", "file", name, "err", err)
		te = internal("the code-file store failed: %v", err)
	}
	te.Filename = name
	return te
}

func notFoundMessage(name string) string {
	return fmt.Sprintf("no code file %q in this session: list_code_files lists them, initialize_code_file creates one", name)
}

// fileResult renders r; text is the text content, or the status line when
// empty. isError is true exactly when r.Status is not ok.
func fileResult(r FileResult, text string) *mcp.CallToolResult {
	if text == "" {
		text = statusLine(r.Status, r.Message)
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

// formatSize writes n bytes for a reader of a tool's text: "32 MiB",
// "512 KiB", "1000 bytes".
func formatSize(n int64) string {
	count, unit := units.Scale(n, units.MiB)
	if unit == "" {
		unit = "bytes"
	}
	return fmt.Sprintf("%d %s", count, unit)
}
