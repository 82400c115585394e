package frontend

import (
	"strings"
	"testing"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/oklog/ulid/v2"
)

// aliceWorkspace has Alice, in a session of a protocol revision with
// session ids, write a code file, run a job (whose result the test puts),
// choose an environment, and ask for her workspace's handle. It returns
// the handle and the job id.
func (fx *authFixture) aliceWorkspace(t *testing.T) (handle, job string) {
	t.Helper()
	alice, err := fx.connectVersion(t, mcp.ProtocolVersion20251125, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, alice, "initialize_code_file", map[string]any{"content": "secret = 1\n", "filename": "a"}); res.IsError {
		t.Fatal(textOf(res))
	}
	job = fx.submitUnanswered(t, alice)
	rec, err := fx.b.GetJobRecord(t.Context(), job)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.b.PutResult(t.Context(), &wire.Result{JobID: job, Scope: rec.Scope, Status: wire.StatusOK, Stdout: "hers\n"}); err != nil {
		t.Fatal(err)
	}
	spec := envspec.Spec{Manager: envspec.ManagerVenv, Python: "3.12"}
	if err := fx.f.setSessionEnv(t.Context(), rec.Scope, &spec, spec.ID()); err != nil {
		t.Fatal(err)
	}
	res, ws := callTool[WorkspaceResult](t, alice, "workspace_info", nil)
	if res.IsError || !handleRe.MatchString(ws.Workspace) {
		t.Fatalf("workspace_info: %s", textOf(res))
	}
	if _, again := callTool[WorkspaceResult](t, alice, "workspace_info", nil); again.Workspace != ws.Workspace {
		t.Fatalf("workspace_info twice: %s, then %s", ws.Workspace, again.Workspace)
	}
	return ws.Workspace, job
}

// Alice reconnects, with a new session and sessionless, and reaches her
// earlier workspace by its handle: its code file, its run, its job's
// result, its environment. Without the handle, the new session is a new,
// empty workspace.
func TestHTTPWorkspaceHandleReachesEarlierState(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	handle, job := fx.aliceWorkspace(t)
	session, err := fx.connectVersion(t, mcp.ProtocolVersion20251125, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	sessionless, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*client.Client{"new session": session, "sessionless": sessionless} {
		if res, _ := callTool[FileResult](t, c, "read_code_file", map[string]any{"file_path": "a.py"}); !res.IsError {
			t.Errorf("%s without the handle read the file: %s", name, textOf(res))
		}
		ws := map[string]any{"workspace": handle}
		if res, _ := callTool[FileResult](t, c, "read_code_file", map[string]any{"file_path": "a.py", "workspace": handle}); res.IsError || textOf(res) != "secret = 1\n" {
			t.Errorf("%s: read_code_file: %s", name, textOf(res))
		}
		if res, l := callTool[ListResult](t, c, "list_code_files", ws); res.IsError || len(l.Runs) != 1 || l.Runs[0].JobID != job {
			t.Errorf("%s: list_code_files: %s", name, textOf(res))
		}
		if res, er := callTool[ExecResult](t, c, "get_job_result", map[string]any{"job_id": job, "workspace": handle}); res.IsError || er.Stdout != "hers\n" {
			t.Errorf("%s: get_job_result: %s", name, textOf(res))
		}
		if res, env := callTool[EnvResult](t, c, "get_environment_config", ws); res.IsError || env.Spec == nil || env.Spec.Python != "3.12" {
			t.Errorf("%s: get_environment_config: %s", name, textOf(res))
		}
		if res, w := callTool[WorkspaceResult](t, c, "workspace_info", ws); res.IsError || w.Workspace != handle {
			t.Errorf("%s: workspace_info in the workspace: %s", name, textOf(res))
		}
	}
}

// new_workspace makes an empty workspace of the caller's, apart from the
// session's, that any later session of the caller reaches by its handle.
func TestHTTPNewWorkspace(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	c, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	res, ws := callTool[WorkspaceResult](t, c, "new_workspace", nil)
	if res.IsError || !handleRe.MatchString(ws.Workspace) {
		t.Fatalf("new_workspace: %s", textOf(res))
	}
	if res, _ := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": "x = 2\n", "filename": "b", "workspace": ws.Workspace}); res.IsError {
		t.Fatal(textOf(res))
	}
	if res, _ := callTool[FileResult](t, c, "read_code_file", map[string]any{"file_path": "b.py"}); !res.IsError {
		t.Errorf("the session's own workspace holds the new workspace's file: %s", textOf(res))
	}
	c2, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, c2, "read_code_file", map[string]any{"file_path": "b.py", "workspace": ws.Workspace}); res.IsError || textOf(res) != "x = 2\n" {
		t.Errorf("a later session: %s", textOf(res))
	}
}

// Bob, with his own token, presents everything of Alice's he may have
// learnt: her workspace's handle (to every tool), her job id, her file
// name and her run's job id. Each answer is exactly the answer to an id
// that never existed, and Alice's state is unchanged.
func TestHTTPWorkspaceIDsOfAnotherPrincipal(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	handle, job := fx.aliceWorkspace(t)
	bob, err := fx.connect(t, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	tools, err := bob.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	unknown := newHandle()
	for _, tool := range tools.Tools {
		if _, ok := tool.InputSchema.Properties[workspaceArg]; !ok {
			t.Errorf("%s takes no %q argument", tool.Name, workspaceArg)
		}
		args := map[string]any{"code": "print(1)", "file_path": "a.py", "content": "x\n", "job_id": job, "packages": []any{"six"}, "names": []any{"six"}}
		args[workspaceArg] = handle
		theirs := bobCall(t, bob, tool.Name, args)
		args[workspaceArg] = unknown
		none := bobCall(t, bob, tool.Name, args)
		if theirs == "" || strings.ReplaceAll(theirs, handle, unknown) != none {
			t.Errorf("%s with alice's handle: %q; with an unknown one: %q", tool.Name, theirs, none)
		}
	}
	other := ulid.Make().String()
	sameAsUnknown := func(tool string, args func(id string) map[string]any) {
		t.Helper()
		theirs := bobCall(t, bob, tool, args(job))
		none := bobCall(t, bob, tool, args(other))
		if theirs == "" || strings.ReplaceAll(theirs, job, other) != none {
			t.Errorf("%s with alice's job id: %q; with an unknown one: %q", tool, theirs, none)
		}
	}
	sameAsUnknown("get_job_result", func(id string) map[string]any { return map[string]any{"job_id": id} })
	sameAsUnknown("read_code_file", func(id string) map[string]any { return map[string]any{"job_id": id} })
	for _, tool := range []string{"read_code_file", "append_to_code_file", "execute_code_file", "delete_code_file"} {
		theirs := bobCall(t, bob, tool, map[string]any{"file_path": "a.py", "content": "x\n"})
		none := bobCall(t, bob, tool, map[string]any{"file_path": "zz.py", "content": "x\n"})
		if theirs == "" || strings.ReplaceAll(theirs, "a.py", "zz.py") != none {
			t.Errorf("%s of alice's file name: %q; of an unknown one: %q", tool, theirs, none)
		}
	}

	alice, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, alice, "read_code_file", map[string]any{"file_path": "a.py", "workspace": handle}); res.IsError || textOf(res) != "secret = 1\n" {
		t.Errorf("alice's file after bob's attempts: %s", textOf(res))
	}
}

// bobCall calls tool and returns its text, which must be an error's.
func bobCall(t *testing.T, c *client.Client, tool string, args map[string]any) string {
	t.Helper()
	res, _ := callTool[map[string]any](t, c, tool, args)
	if !res.IsError {
		t.Errorf("%s %v: not an error: %s", tool, args, textOf(res))
		return ""
	}
	return textOf(res)
}
