package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
)

// workdirRefusal matches the refusal of an acme job by working_dir_bytes=3000000.
var workdirRefusal = regexp.MustCompile(`^quota working_dir_bytes of tenant "acme" reached: its working directories take (\d+) bytes, as measured after their latest jobs \(the limit is 3000000\); nothing was done; free space: empty files with upload_file`)

// Two frontends and two worker processes of one cluster with --quota
// working_dir_bytes=3000000: tenant acme fills 2 MB in each of two
// workspaces with real Python (a job, and a call in a context); its next
// job and its next call in a context, through the other frontend, are
// refused naming the quota, its value and acme's usage, while globex's
// job runs; emptying a file with upload_file lets acme run again; filled
// again, acme is refused, `admin usage` shows what its directories take,
// and `admin gc` collecting its workspaces lets it run again.
func TestClusterQuotaWorkingDirBytes(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	carol, lineC, _ := auth.NewToken("globex", "carol")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA, lineC)
	cl := startCluster(t, 2)
	cl.env = append(cl.env, "CODEXEC_AUTH=tokens", "CODEXEC_AUTH_TOKENS="+tokens, "CODEXEC_QUOTA=working_dir_bytes=3000000")
	one, two := cl.addFrontend(t), cl.addFrontend(t)
	a1, a2 := connected(t, one, alice), connected(t, two, alice)

	_, ws := callAs[frontend.WorkspaceResult](t, a1, "new_workspace", nil)
	if ws.Workspace == "" {
		t.Fatalf("new_workspace: %+v", ws)
	}
	fill := func(file string, args map[string]any) {
		t.Helper()
		args["code"] = fmt.Sprintf("import os\nopen(%q, 'wb').write(os.urandom(2_000_000))\nprint('filled')", file)
		if _, er := call(t, a1, "execute_code", args); er.Stdout != "filled\n" {
			t.Fatalf("fill %s: %+v", file, er)
		}
	}
	refused := func() {
		t.Helper()
		res, er := call(t, a2, "execute_code", map[string]any{"code": "print('over')"})
		m := workdirRefusal.FindStringSubmatch(er.Message)
		if !res.IsError || er.Status != "rejected" || er.JobID != "" || m == nil {
			t.Fatalf("acme's job over its working_dir_bytes: %s", text(res))
		}
		if used, _ := strconv.Atoi(m[1]); used < 4_000_000 {
			t.Fatalf("acme's usage reported as %d bytes, want at least the 4,000,000 written", used)
		}
	}
	runs := func(who string) {
		t.Helper()
		if _, er := call(t, a2, "execute_code", map[string]any{"code": "print('runs')"}); er.Stdout != "runs\n" {
			t.Fatalf("acme's job %s: %+v", who, er)
		}
	}
	// One workspace filled by a context's call, the other by a job.
	if res, cr := callAs[frontend.ContextResult](t, a1, "create_context", map[string]any{"name": "c"}); res.IsError {
		t.Fatalf("create_context: %+v (%s)", cr, text(res))
	}
	if _, er := call(t, a1, "run_in_context", map[string]any{"context_id": "c",
		"code": "import os\nopen('a', 'wb').write(os.urandom(2_000_000))\nprint('filled')"}); er.Stdout != "filled\n" {
		t.Fatalf("fill a in a context: %+v", er)
	}
	fill("a", map[string]any{"workspace": ws.Workspace})
	refused()
	if res, er := call(t, a2, "run_in_context", map[string]any{"context_id": "c", "code": "print('over')"}); !res.IsError || !workdirRefusal.MatchString(er.Message) {
		t.Fatalf("acme's call in a context over its working_dir_bytes: %s", text(res))
	}
	if _, er := call(t, connected(t, one, carol), "execute_code", map[string]any{"code": "print('globex')"}); er.Stdout != "globex\n" {
		t.Fatalf("globex's job while acme is over its quota: %+v", er)
	}

	if res, up := callAs[frontend.UploadResult](t, a1, "upload_file", map[string]any{"path": "a", "content": ""}); res.IsError || up.Status != "ok" {
		t.Fatalf("emptying a file over the quota: %s", text(res))
	}
	runs("after emptying a file")

	fill("b", map[string]any{})
	refused()
	var workdir int64
	for line := range strings.Lines(runCodexec(t, codexecEnv(), "admin", "usage", "--redis", cl.redisURL, "--tenant", "acme", "--json")) {
		var u frontend.WorkspaceUsage
		if err := json.Unmarshal([]byte(line), &u); err != nil {
			t.Fatalf("admin usage --json: %q: %v", line, err)
		}
		workdir += u.WorkdirBytes
	}
	if workdir < 4_000_000 {
		t.Fatalf("admin usage: acme's working directories take %d bytes, want at least the 4,000,000 written", workdir)
	}
	if out := runCodexec(t, codexecEnv(), "admin", "gc", "--redis", cl.redisURL, "--older-than", "1ns"); !strings.Contains(out, "removed ") {
		t.Fatalf("admin gc:\n%s", out)
	}
	runs("after its workspaces were collected")
}
