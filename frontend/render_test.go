package frontend

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

func TestToolResultRendering(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		res     wire.Result
		isError bool
		want    []string // substrings of the text content, in order
	}{
		{"ok", wire.Result{JobID: "J", Status: wire.StatusOK, Stdout: "1\n", Message: "exit code 0"}, false,
			[]string{"1\n", "[ok: exit code 0"}},
		{"stderr on success", wire.Result{JobID: "J", Status: wire.StatusOK, Stdout: "out", Stderr: "warn"}, false,
			[]string{"out\n", "--- stderr ---\nwarn\n", "[ok"}},
		{"failure keeps stdout", wire.Result{JobID: "J", Status: wire.StatusError, ExitCode: 1, Stdout: "partial\n", Stderr: "Traceback\n"}, true,
			[]string{"partial\n", "--- stderr ---", "Traceback", "[error"}},
		{"truncated", wire.Result{JobID: "J", Status: wire.StatusOK, Stdout: "yyyy", StdoutTruncated: true, StdoutBytes: 100}, false,
			[]string{"yyyy\n", "[... stdout truncated: 4 of 100 bytes shown]"}},
		{"timeout", wire.Result{JobID: "J", Status: wire.StatusTimeout, ExitCode: -1, Message: "timed out"}, true,
			[]string{"[timeout: timed out"}},
		{"rejected", wire.Result{Status: wire.StatusRejected, Message: "code is empty"}, true,
			[]string{"[rejected: code is empty]"}},
		{"limit", wire.Result{JobID: "J", Status: wire.StatusLimit, ExitCode: -1, Limit: wire.LimitMemory, Message: "killed at 1GiB"}, true,
			[]string{"[limit: memory limit: killed at 1GiB | "}},
		{"limit named by its message", wire.Result{JobID: "J", Status: wire.StatusLimit, ExitCode: -1, Limit: wire.LimitMemory, Message: "memory limit reached (100 MiB)"}, true,
			[]string{"[limit: memory limit reached (100 MiB) | "}},
		{"limit without message", wire.Result{JobID: "J", Status: wire.StatusLimit, ExitCode: -1, Limit: wire.LimitProcesses}, true,
			[]string{"[limit: processes limit | "}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := toolResult(&tc.res, "f.py")
			if out.IsError != tc.isError {
				t.Fatalf("isError = %v, want %v", out.IsError, tc.isError)
			}
			tc0, ok := out.Content[0].(mcp.TextContent)
			if !ok {
				t.Fatalf("content %T", out.Content[0])
			}
			got := tc0.Text
			pos := 0
			for _, w := range tc.want {
				i := strings.Index(got[pos:], w)
				if i < 0 {
					t.Fatalf("text %q lacks %q after position %d", got, w, pos)
				}
				pos += i + len(w)
			}
			sc, ok := out.StructuredContent.(ExecResult)
			if !ok || sc.Status != string(tc.res.Status) || sc.Stdout != tc.res.Stdout || sc.Filename != "f.py" || sc.Limit != tc.res.Limit {
				t.Fatalf("structured content %+v", out.StructuredContent)
			}
		})
	}
}

func TestScopeFrom(t *testing.T) {
	t.Parallel()
	if got := scopeFrom(context.Background(), true); got != StdioScope {
		t.Fatalf("stdio scope %q", got)
	}
	if got := scopeFrom(context.Background(), false); got != AnonymousScope {
		t.Fatalf("no session, no credentials: %q", got)
	}
	req := func(auth string) *http.Request {
		r, _ := http.NewRequest("POST", "http://x/mcp", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	a := scopeFrom(httpContext(context.Background(), req("Bearer a")), false)
	a2 := scopeFrom(httpContext(context.Background(), req("Bearer a")), false)
	b := scopeFrom(httpContext(context.Background(), req("Bearer ../../b")), false)
	if a != a2 || a == b || !wire.ValidScope(a) || !wire.ValidScope(b) {
		t.Fatalf("principal scopes: a=%q a2=%q b=%q", a, a2, b)
	}
	// A request with two Authorization headers is not taken for the caller
	// of its first: behind a proxy that adds its header after the client's,
	// the client would choose any caller's scope by sending one first.
	both := req("Bearer a")
	both.Header.Add("Authorization", "Bearer proxy-set-b")
	if s := scopeFrom(httpContext(context.Background(), both), false); s == a || s == b || !wire.ValidScope(s) {
		t.Fatalf("two headers: scope %q, a=%q b=%q", s, a, b)
	}
	if callerKey(both) == callerKey(req("Bearer a")) {
		t.Fatal("two headers: the caller of the first")
	}
}
