package frontend

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

// A workspace's owner record is kept for the workspace ttl and counted in
// no quota. A call that stores nothing in a new session records none (until
// 2026-12-05 each did: a client sending list_contexts with a new session id
// each time left 600 records a second); a job, a read of a file included,
// records it once admitted, since its worker makes the session's directories
// there, which the collector removes only from a recorded workspace (until
// 2026-12-05 a resources/read in a new session was recorded nowhere, and its
// file system stayed on the worker for good).
func TestOwnerRecordedOnlyWhenTheWorkspaceHoldsSomething(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: fx.f.cfg.Pool})
	if err := fx.f.store.Touch(t.Context(), fx.f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	owners := func() int {
		all, err := fx.f.store.HGetAll(t.Context(), fx.f.cfg.Keys.ScopeOwners())
		if err != nil {
			t.Fatal(err)
		}
		return len(all)
	}
	for _, call := range []struct {
		tool string
		args map[string]any
	}{
		{"list_contexts", nil},
		{"list_code_files", nil},
		{"get_environment_config", nil},
		{"get_job_result", map[string]any{"job_id": "01KC0000000000000000000000"}},
		{"read_code_file", map[string]any{"file_path": "a.py"}},
		{"delete_code_file", map[string]any{"file_path": "a.py"}},
		{"close_context", map[string]any{"context_id": "ctx-a"}},
		{"execute_code_file", map[string]any{"file_path": "a.py"}},
	} {
		c, err := fx.connectVersion(t, "2025-06-18", fx.tokens["alice"], "")
		if err != nil {
			t.Fatal(err)
		}
		callTool[map[string]any](t, c, call.tool, call.args)
		if n := owners(); n != 0 {
			t.Errorf("%s in a new session, which stores nothing there: %d owner records, want 0", call.tool, n)
		}
	}

	// A read of a file is a job: its session is recorded once it is admitted.
	c, err := fx.connectVersion(t, "2025-06-18", fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	before := owners()
	ctx, cancel := context.WithCancel(t.Context())
	read := make(chan struct{})
	go func() {
		defer close(read)
		req := mcp.ReadResourceRequest{}
		req.Params.URI = "codexec://workspace/a.txt"
		_, _ = c.ReadResource(ctx, req)
	}()
	n := 0
	for range 200 {
		if n = owners() - before; n > 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-read
	if n != 1 {
		t.Errorf("resources/read in a new session, whose job makes the session's directories: %d new owner records, want 1", n)
	}

	// So is a call that runs code.
	c, err = fx.connectVersion(t, "2025-06-18", fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	before = owners()
	answer(t, fx.b, fx.submitUnanswered(t, c))
	if n := owners() - before; n != 1 {
		t.Errorf("execute_code in a new session: %d new owner records, want 1", n)
	}
}
