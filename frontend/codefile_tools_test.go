package frontend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/statestore"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// These tests call the code-file tools through mcp-go's in-process client
// on a Frontend without a broker: everything but running code.

type toolBundle struct {
	c      *client.Client
	f      *Frontend
	mirror string
}

func setupTools(t *testing.T, mirror bool) toolBundle {
	t.Helper()
	cfg := Config{CodeFiles: codefiles.Config{MaxFileBytes: 1 << 20, MaxFiles: 4}, AnnounceWait: 100 * time.Millisecond}
	if mirror {
		cfg.CodeFiles.MirrorDir = t.TempDir()
	}
	return setupToolsConfig(t, cfg)
}

// newDevFrontend is a frontend of cfg on a bbolt state store of its own,
// without a broker: the tools that need none.
func newDevFrontend(t *testing.T, cfg Config) *Frontend {
	t.Helper()
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f, err := New(cfg, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func setupToolsConfig(t *testing.T, cfg Config) toolBundle {
	t.Helper()
	f := newDevFrontend(t, cfg)
	c, err := client.NewInProcessClient(f.MCPServer(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	req.Params.ClientInfo = mcp.Implementation{Name: "test", Version: "0"}
	if _, err := c.Initialize(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return toolBundle{c: c, f: f, mirror: f.cfg.CodeFiles.MirrorDir}
}

func callTool[T any](t *testing.T, c *client.Client, name string, args map[string]any) (*mcp.CallToolResult, T) {
	t.Helper()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = name, args
	res, err := c.CallTool(context.Background(), req)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out T
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, raw, err)
	}
	return res, out
}

func textOf(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestCodeFileToolsDev(t *testing.T) {
	t.Parallel()
	b := setupTools(t, true)
	res, fr := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "x = 1\n", "filename": "main"})
	wantPath := filepath.Join(b.mirror, "local", "files", "main.py")
	if res.IsError || fr.FilePath != wantPath || fr.Filename != "main.py" || fr.Size != 6 || fr.Replaced {
		t.Fatalf("initialize: isError=%v %+v", res.IsError, fr)
	}
	// Every accepted form of file_path reaches the same file.
	for i, p := range []string{fr.FilePath, "main.py", "main", "codexec://files/main.py"} {
		res, fr := callTool[FileResult](t, b.c, "append_to_code_file", map[string]any{"file_path": p, "content": "x += 1\n"})
		if res.IsError || fr.Size != int64(6+7*(i+1)) || fr.Appended != 7 {
			t.Fatalf("append via %q: isError=%v %+v", p, res.IsError, fr)
		}
	}
	want := "x = 1\n" + strings.Repeat("x += 1\n", 4)
	res, fr = callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": wantPath})
	if res.IsError || textOf(res) != want || fr.SHA256 != hexSHA256(want) || fr.Size != int64(len(want)) {
		t.Fatalf("read: isError=%v text %q %+v", res.IsError, textOf(res), fr)
	}
	if got, err := os.ReadFile(wantPath); err != nil || string(got) != want {
		t.Fatalf("on-disk copy %q, %v", got, err)
	}

	// initialize of an existing name replaces it and says so.
	res, fr = callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "y = 2\n", "filename": "main.py"})
	if res.IsError || !fr.Replaced || !strings.Contains(fr.Message, "Replaced") {
		t.Fatalf("re-initialize: %+v", fr)
	}
	// A hostile filename is cleaned, and the result says to what.
	res, fr = callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "", "filename": "../../etc/passwd"})
	if res.IsError || fr.Filename != "etc_passwd.py" || !strings.Contains(fr.Message, "cleaned") ||
		fr.FilePath != filepath.Join(b.mirror, "local", "files", "etc_passwd.py") {
		t.Fatalf("hostile filename: %+v", fr)
	}
	// No filename: a new unique name each time.
	_, a := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "a"})
	_, c := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "c"})
	if a.Filename == c.Filename || !strings.HasPrefix(a.Filename, "code_") {
		t.Fatalf("generated names %q, %q", a.Filename, c.Filename)
	}
	// The fifth file passes the limit of 4.
	res, fr = callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "", "filename": "five"})
	if !res.IsError || fr.Status != "limit" || !strings.Contains(fr.Message, "limit is 4") {
		t.Fatalf("fifth file: isError=%v %+v", res.IsError, fr)
	}
	res, fr = callTool[FileResult](t, b.c, "append_to_code_file", map[string]any{"file_path": "main.py", "content": strings.Repeat("#", 1<<20)})
	if !res.IsError || fr.Status != "limit" {
		t.Fatalf("append past the size limit: isError=%v %+v", res.IsError, fr)
	}

	res, lr := callTool[ListResult](t, b.c, "list_code_files", nil)
	if res.IsError || len(lr.Files) != 4 || lr.MaxFiles != 4 || lr.Files[2].Filename != "etc_passwd.py" || lr.Files[3].FilePath != wantPath {
		t.Fatalf("list: %+v", lr)
	}
	res, _ = callTool[ListResult](t, b.c, "list_code_files", map[string]any{"max_runs": -1})
	if !res.IsError {
		t.Fatal("list with max_runs -1 succeeded")
	}

	res, fr = callTool[FileResult](t, b.c, "delete_code_file", map[string]any{"file_path": wantPath})
	if res.IsError || fr.Filename != "main.py" {
		t.Fatalf("delete: %+v", fr)
	}
	if _, err := os.Stat(wantPath); !os.IsNotExist(err) {
		t.Fatalf("on-disk copy survived delete: %v", err)
	}
	for _, tool := range []string{"read_code_file", "append_to_code_file", "delete_code_file"} {
		args := map[string]any{"file_path": "main.py"}
		if tool == "append_to_code_file" {
			args["content"] = "x"
		}
		res, fr = callTool[FileResult](t, b.c, tool, args)
		if !res.IsError || fr.Status != "not_found" || !strings.Contains(fr.Message, "list_code_files") {
			t.Fatalf("%s after delete: %+v", tool, fr)
		}
	}
	res, er := callTool[ExecResult](t, b.c, "execute_code_file", map[string]any{"file_path": "main.py"})
	if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, "no code file") {
		t.Fatalf("execute a deleted file: %+v", er)
	}
	// An existing file gets as far as looking for a worker.
	res, er = callTool[ExecResult](t, b.c, "execute_code_file", map[string]any{"file_path": a.FilePath})
	if !res.IsError || !strings.Contains(er.Message, "no live worker") {
		t.Fatalf("execute with no worker: %+v", er)
	}
}

func TestCodeFileToolsCluster(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	res, fr := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "a\n", "filename": "job.py"})
	if res.IsError || fr.FilePath != "codexec://files/job.py" {
		t.Fatalf("initialize: %+v", fr)
	}
	res, fr = callTool[FileResult](t, b.c, "append_to_code_file", map[string]any{"file_path": fr.FilePath, "content": "b\n"})
	if res.IsError || fr.Size != 4 {
		t.Fatalf("append: %+v", fr)
	}
	res, _ = callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": "job.py"})
	if textOf(res) != "a\nb\n" {
		t.Fatalf("read %q", textOf(res))
	}
}

func TestCodeFileToolsHostilePaths(t *testing.T) {
	t.Parallel()
	b := setupTools(t, true)
	_, fr := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": "ok\n", "filename": "real.py"})
	other := filepath.Join(b.mirror, "s-0000", "files", "real.py")
	for _, p := range []any{
		"../real.py", "../../../../etc/passwd", "/etc/passwd", other, fr.FilePath + "/../real.py",
		b.mirror + "/local/files/../files/real.py", b.mirror + "/local/./files/real.py", filepath.Join(b.mirror, "local", "real.py"),
		"real.py\x00.txt", "..\\real.py", strings.Repeat("r", 200) + ".py", strings.Repeat("/x", 5000), ".real.py", "",
		"codexec://files/../../real.py", "file:///etc/passwd", 42, nil,
	} {
		for _, tool := range []string{"read_code_file", "append_to_code_file", "delete_code_file", "execute_code_file"} {
			res, err := func() (*mcp.CallToolResult, error) {
				req := mcp.CallToolRequest{}
				req.Params.Name = tool
				req.Params.Arguments = map[string]any{"file_path": p, "content": "pwned"}
				return b.c.CallTool(context.Background(), req)
			}()
			if err != nil {
				t.Fatal(err)
			}
			if !res.IsError || !strings.Contains(textOf(res), "rejected") {
				t.Errorf("%s(%q): want a rejected error, got isError=%v %q", tool, p, res.IsError, textOf(res))
			}
		}
	}
	res, _ := callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": "real.py"})
	if textOf(res) != "ok\n" {
		t.Fatalf("the real file changed: %q", textOf(res))
	}
	res, fr = callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": "real.py", "job_id": "01J00000000000000000000000"})
	if !res.IsError || fr.Status != "rejected" {
		t.Fatalf("file_path and job_id together: %+v", fr)
	}
	res, fr = callTool[FileResult](t, b.c, "read_code_file", map[string]any{"job_id": "../../etc/passwd"})
	if !res.IsError || fr.Status != "not_found" {
		t.Fatalf("a malformed job id: %+v", fr)
	}
}

// formatSize is the size in the code-file tools' descriptions and listing:
// a unit, after a space, when one divides the size exactly, else bytes.
func TestFormatSize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"},
		{1000, "1000 bytes"},
		{1 << 10, "1 KiB"},
		{1536, "1536 bytes"},
		{512 << 10, "512 KiB"},
		{32 << 20, "32 MiB"},
		{1 << 30, "1024 MiB"},
		{1<<20 + 1<<10, "1025 KiB"},
	} {
		if got := formatSize(tc.n); got != tc.want {
			t.Errorf("formatSize(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestCodeFileToolsStorageBudget: a write past the session's storage budget
// fails with status limit and a message that names the usage and the limit,
// and leaves the files as they were.
func TestCodeFileToolsStorageBudget(t *testing.T) {
	t.Parallel()
	b := setupToolsConfig(t, Config{CodeFiles: codefiles.Config{MaxFileBytes: 1 << 20, MaxSessionBytes: 1000}})
	res, fr := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": strings.Repeat("a", 600), "filename": "a.py"})
	if res.IsError {
		t.Fatalf("initialize: %+v", fr)
	}
	res, fr = callTool[FileResult](t, b.c, "append_to_code_file", map[string]any{"file_path": "a.py", "content": strings.Repeat("b", 500)})
	if !res.IsError || fr.Status != "limit" || !strings.Contains(fr.Message, "keeps 600 bytes") || !strings.Contains(fr.Message, "limit is 1000 bytes") {
		t.Fatalf("append past the budget: isError=%v %+v", res.IsError, fr)
	}
	res, fr = callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": strings.Repeat("c", 500), "filename": "c.py"})
	if !res.IsError || fr.Status != "limit" || !strings.Contains(fr.Message, "needs 500 more") {
		t.Fatalf("initialize past the budget: isError=%v %+v", res.IsError, fr)
	}
	res, lr := callTool[ListResult](t, b.c, "list_code_files", nil)
	if res.IsError || len(lr.Files) != 1 || lr.Files[0].Size != 600 {
		t.Fatalf("list after refused writes: %+v", lr)
	}
	if res, fr = callTool[FileResult](t, b.c, "delete_code_file", map[string]any{"file_path": "a.py"}); res.IsError {
		t.Fatalf("delete: %+v", fr)
	}
	if res, fr = callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": strings.Repeat("c", 1000), "filename": "c.py"}); res.IsError {
		t.Fatalf("initialize after delete freed the room: %+v", fr)
	}
}

// An argument a tool does not take fails the call before it does anything,
// naming the tool's arguments: a client that guessed `timeout` for
// `timeout_seconds` had its code run with the default timeout.
func TestUnknownArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	res, er := callTool[ExecResult](t, b.c, "execute_code", map[string]any{"code": "import time; time.sleep(5)", "timeout": 1})
	if !res.IsError || er.Status != "rejected" || er.JobID != "" ||
		!strings.Contains(er.Message, `no argument "timeout"`) || !strings.Contains(er.Message, `did you mean "timeout_seconds"`) {
		t.Errorf("execute_code with timeout: isError=%v %+v, want rejected, naming timeout_seconds", res.IsError, er)
	}
	res, lr := callTool[ListResult](t, b.c, "list_code_files", map[string]any{"max_runs": 1, "bogus": true, "also": 1})
	if !res.IsError || lr.Status != "rejected" || !strings.Contains(lr.Message, `"also", "bogus"`) || !strings.Contains(lr.Message, "max_runs") {
		t.Errorf("list_code_files with two unknown arguments: isError=%v %+v", res.IsError, lr)
	}
	// A refusal quotes at most a few names, each cut short: it must not
	// send a caller's megabytes back.
	args := map[string]any{strings.Repeat("z", 1<<20): 1}
	for i := range 1000 {
		args[fmt.Sprintf("bogus%04d", i)] = i
	}
	res, lr = callTool[ListResult](t, b.c, "list_code_files", args)
	if !res.IsError || lr.Status != "rejected" || len(lr.Message) > 2000 ||
		!strings.Contains(lr.Message, `"bogus0000"`) || !strings.Contains(lr.Message, "and 993 more") || strings.Contains(lr.Message, "bogus0999") {
		t.Errorf("list_code_files with 1,001 unknown arguments: isError=%v status=%s message of %d bytes: %.300s", res.IsError, lr.Status, len(lr.Message), lr.Message)
	}
	res, lr = callTool[ListResult](t, b.c, "list_code_files", map[string]any{strings.Repeat("é", 1<<19): 1})
	if !res.IsError || len(lr.Message) > 1000 || !strings.Contains(lr.Message, "(1048576 bytes)") {
		t.Errorf("list_code_files with a 1 MiB argument name: isError=%v message of %d bytes: %.300s", res.IsError, len(lr.Message), lr.Message)
	}
	// The declared ones, the workspace handle included, still pass.
	if res, lr := callTool[ListResult](t, b.c, "list_code_files", map[string]any{"max_runs": 1, "workspace": ""}); res.IsError {
		t.Errorf("list_code_files with its own arguments: %+v", lr)
	}
}

// An argument of the wrong JSON type fails the call, saying which type it
// must be, for every tool alike: get_job_result with a number for job_id
// said that job_id was missing.
func TestWrongTypedArgumentsAreRefused(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	for _, tc := range []struct {
		tool string
		args map[string]any
		says string
	}{
		{"get_job_result", map[string]any{"job_id": 12345}, "argument 'job_id' must be a string, not a number"},
		{"read_code_file", map[string]any{"file_path": true}, "argument 'file_path' must be a string, not true"},
		{"execute_code", map[string]any{"code": []any{"print(1)"}}, "argument 'code' must be a string, not a list"},
		{"execute_code", map[string]any{"code": "print(1)", "timeout_seconds": "10"}, "argument 'timeout_seconds' must be a number, not a string"},
		{"execute_code", map[string]any{"code": "print(1)", "limits": 512}, "argument 'limits' must be an object, not a number"},
		{"list_code_files", map[string]any{"max_runs": "3"}, "argument 'max_runs' must be a number, not a string"},
		{"execute_code", map[string]any{"code": "print(1)", "timeout_seconds": true}, "argument 'timeout_seconds' must be a number, not true"},
		{"check_installed_packages", map[string]any{"packages": "numpy"}, "argument 'packages' must be a list of strings, not a string"},
		{"check_installed_packages", map[string]any{"packages": []any{"numpy", 2}}, "argument 'packages' must be a list of strings: item 2 is a number"},
		{"configure_environment", map[string]any{"type": 1}, "argument 'type' must be a string (one of conda, venv, venv-uv, default), not a number"},
		{"upload_file", map[string]any{"path": "a.txt", "content": map[string]any{}}, "argument 'content' must be a string, not an object"},
	} {
		res, err := b.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: tc.tool, Arguments: tc.args}})
		if err != nil {
			t.Fatalf("%s: %v", tc.tool, err)
		}
		var out struct {
			Status  string `json:"status"`
			Message string `json:"message"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &out)
		if !res.IsError || out.Status != "rejected" || !strings.Contains(out.Message, tc.says) {
			t.Errorf("%s %v: isError=%v %+v; want rejected saying %q", tc.tool, tc.args, res.IsError, out, tc.says)
		}
	}
	// Whole numbers pass where a number is declared, null where anything is.
	if res, lr := callTool[ListResult](t, b.c, "list_code_files", map[string]any{"max_runs": 2, "workspace": nil}); res.IsError {
		t.Errorf("list_code_files with its own arguments: %+v", lr)
	}
}

// A call's arguments that are not an object (a list, or the JSON object
// sent as a string, as a bridge from function-calling APIs may pass it on)
// are refused saying so: the tool read them as no arguments at all, and
// said that 'code' was missing when it had been sent. An empty list, which
// some JSON encoders write for an empty map, is no arguments.
func TestArgumentsMustBeAnObject(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	for _, tc := range []struct {
		args any
		says string
	}{
		{[]any{"print(1)"}, "the arguments of execute_code must be a JSON object of name: value, not a list"},
		{`{"code": "print(1)"}`, "not a string (JSON text of an object: send the object itself)"},
		{float64(7), "not a number"},
	} {
		res, err := b.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "execute_code", Arguments: tc.args}})
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		var out ExecResult
		raw, _ := json.Marshal(res.StructuredContent)
		_ = json.Unmarshal(raw, &out)
		if !res.IsError || out.Status != "rejected" || !strings.Contains(out.Message, tc.says) || out.JobID != "" {
			t.Errorf("execute_code with arguments %#v: isError=%v %+v; want rejected saying %q", tc.args, res.IsError, out, tc.says)
		}
	}
	res, err := b.c.CallTool(t.Context(), mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "list_code_files", Arguments: []any{}}})
	if err != nil || res.IsError {
		t.Errorf("list_code_files with arguments []: %v %+v, want its answer", err, res)
	}
}

// read_code_file reads a piece with offset and length: the pieces, read
// on from offset+length until more is false, are the file byte for byte,
// each whole characters; size and sha256 are the whole file's.
func TestReadCodeFileInParts(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	content := strings.Repeat("s = \"héllo, wörld — ✓\"\n", 40)
	if res, fr := callTool[FileResult](t, b.c, "initialize_code_file", map[string]any{"content": content, "filename": "parts.py"}); res.IsError {
		t.Fatalf("initialize: %+v", fr)
	}
	whole := sha256.Sum256([]byte(content))
	for _, length := range []int{1, 2, 7, 100, len(content)} {
		var got strings.Builder
		for pieces := 0; ; pieces++ {
			res, fr := callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": "parts.py", "offset": got.Len(), "length": length})
			piece := textOf(res)
			if res.IsError || fr.Offset != int64(got.Len()) || fr.Length != int64(len(piece)) || fr.Size != int64(len(content)) ||
				fr.SHA256 != hex.EncodeToString(whole[:]) || !utf8.ValidString(piece) || len(piece) == 0 || len(piece) > max(length, 3) {
				t.Fatalf("length %d, piece %d: isError=%v %+v %q", length, pieces, res.IsError, fr, piece)
			}
			got.WriteString(piece)
			if fr.More != (got.Len() < len(content)) {
				t.Fatalf("length %d at %d: more=%v", length, got.Len(), fr.More)
			}
			if !fr.More {
				break
			}
		}
		if got.String() != content {
			t.Fatalf("length %d: the pieces differ from the file", length)
		}
	}
	// Without offset and length, the whole file, as before.
	if res, fr := callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": "parts.py"}); res.IsError || textOf(res) != content ||
		fr.Length != int64(len(content)) || fr.More || fr.Offset != 0 {
		t.Fatalf("whole read: %+v", fr)
	}
	// Past the end: nothing, and nothing more.
	if res, fr := callTool[FileResult](t, b.c, "read_code_file", map[string]any{"file_path": "parts.py", "offset": len(content) + 5}); res.IsError || textOf(res) != "" || fr.More {
		t.Fatalf("past the end: %+v", fr)
	}
	for says, args := range map[string]map[string]any{
		"falls inside a character":                 {"offset": strings.Index(content, "é") + 1},
		"'length' must be a whole number of bytes": {"length": 0},
		"'offset' must be a whole number of bytes": {"offset": 1.5},
	} {
		args["file_path"] = "parts.py"
		if res, fr := callTool[FileResult](t, b.c, "read_code_file", args); !res.IsError || fr.Status != "rejected" || !strings.Contains(fr.Message, says) {
			t.Errorf("%v: %+v", args, fr)
		}
	}
}

// An empty job_id is said to be empty, not missing: get_job_result said
// "missing required argument 'job_id'" to a caller that had sent one, and
// read_code_file, given an empty job_id alone, that file_path was missing.
func TestEmptyJobIDSaidEmpty(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	if res, er := callTool[ExecResult](t, b.c, "get_job_result", map[string]any{"job_id": " "}); !res.IsError ||
		er.Status != "rejected" || !strings.Contains(er.Message, "argument 'job_id' is empty") {
		t.Errorf("get_job_result with an empty job_id: isError=%v %+v", res.IsError, er)
	}
	if res, fr := callTool[FileResult](t, b.c, "read_code_file", map[string]any{"job_id": ""}); !res.IsError ||
		fr.Status != "rejected" || !strings.Contains(fr.Message, "argument 'job_id' is empty") {
		t.Errorf("read_code_file with an empty job_id: isError=%v %+v", res.IsError, fr)
	}
	if res, er := callTool[ExecResult](t, b.c, "get_job_result", map[string]any{}); !res.IsError ||
		!strings.Contains(er.Message, "missing required argument 'job_id'") {
		t.Errorf("get_job_result without job_id: isError=%v %+v", res.IsError, er)
	}
}

// read_code_file reads a code file (file_path) or the code of a run
// (job_id). Called with neither it said that file_path was a missing
// required argument, as if the tool took nothing else: a model that had
// a job id in hand was told to find a file name. It names both now.
func TestReadCodeFileWithoutEitherArgumentNamesBoth(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	for _, args := range []map[string]any{{}, {"file_path": nil, "job_id": nil}, {"offset": 0}} {
		res, fr := callTool[FileResult](t, b.c, "read_code_file", args)
		if !res.IsError || fr.Status != "rejected" || !strings.Contains(fr.Message, "file_path") || !strings.Contains(fr.Message, "job_id") {
			t.Errorf("read_code_file %v: isError=%v %+v, want rejected, naming file_path and job_id", args, res.IsError, fr)
		}
	}
}

// A job's timeout travels in whole milliseconds, where 0 means "not
// given": timeout_seconds 0.0001 became 0 ms, and the job ran under the
// default timeout (a minute) while the caller had asked for a tenth of a
// millisecond. A timeout under a millisecond is refused, like a
// non-positive one, saying the least there is.
func TestTimeoutUnderAMillisecondRefused(t *testing.T) {
	t.Parallel()
	f := &Frontend{cfg: Config{DefaultTimeout: time.Minute, MaxTimeout: 10 * time.Minute}}
	for _, secs := range []float64{0.0001, 1e-9, 0.0009} {
		d, err := f.timeoutArg(map[string]any{"timeout_seconds": secs})
		if err == nil || !strings.Contains(err.Error(), "0.001") {
			t.Errorf("timeout_seconds %g: %v, %v; want refused, saying the least is 0.001", secs, d, err)
		}
	}
	for secs, want := range map[float64]time.Duration{0.001: time.Millisecond, 0.5: 500 * time.Millisecond, 600: 10 * time.Minute} {
		if d, err := f.timeoutArg(map[string]any{"timeout_seconds": secs}); err != nil || d != want {
			t.Errorf("timeout_seconds %g: %v, %v; want %v", secs, d, err, want)
		}
	}
}

// check_installed_packages takes names, not requirements. Given one
// ("numpy>=1", "pkg[extra]") it said only that it was "not a package or
// module name", not what to send instead; it says so now.
func TestCheckInstalledPackagesSaysWhatANameIs(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	for _, p := range []string{"numpy>=1", "pkg[extra]", "a b"} {
		res, er := callTool[EnvResult](t, b.c, "check_installed_packages", map[string]any{"packages": []any{"six", p}})
		if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, fmt.Sprintf("%q", p)) ||
			!strings.Contains(er.Message, "without a version") || !strings.Contains(er.Message, "sklearn") {
			t.Errorf("check_installed_packages %q: isError=%v %+v, want rejected, saying what a name is", p, res.IsError, er)
		}
	}
}
