package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
)

// Usage lists each workspace with its owner and what it holds; Collect
// removes, of those unused since the cutoff, everything the state store
// holds (code files, runs, environment choice, handle), after which the
// handle is unknown; a workspace used since is kept whole.
func TestCollectUnusedWorkspaces(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	ctx := t.Context()
	handle, job := fx.aliceWorkspace(t)
	rec, err := fx.b.GetJobRecord(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	old := rec.Scope
	bob, err := fx.connect(t, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, bob, "initialize_code_file", map[string]any{"content": "b = 1\n", "filename": "b"}); res.IsError {
		t.Fatal(textOf(res))
	}

	st, keys := fx.f.store, fx.f.cfg.Keys
	use, err := Usage(ctx, st, keys)
	if err != nil {
		t.Fatal(err)
	}
	byScope := map[string]WorkspaceUsage{}
	for _, u := range use {
		byScope[u.Scope] = u
	}
	if u := byScope[old]; u.Tenant != "acme" || u.Principal != "alice" || !u.Handle || u.Files != 1 || u.Runs != 1 || u.Bytes == 0 {
		t.Fatalf("alice's workspace: %+v (all: %+v)", u, use)
	}

	// Alice's workspace was last used two days ago.
	twoDays := time.Now().Add(-48 * time.Hour)
	if err := st.HSet(ctx, keys.Scopes(), old, fmt.Appendf(nil, "%d", twoDays.UnixMilli())); err != nil {
		t.Fatal(err)
	}
	owner, _ := json.Marshal(ScopeOwner{Tenant: "acme", Principal: "alice", Seen: twoDays})
	if err := st.Set(ctx, keys.ScopeOwner(old), owner, 0); err != nil {
		t.Fatal(err)
	}
	sh, err := fx.f.readScopeHandle(ctx, keys.ScopeHandle(old))
	if err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-24 * time.Hour)
	if gone, err := Collect(ctx, st, keys, cutoff, true); err != nil || len(gone) != 1 || gone[0].Scope != old {
		t.Fatalf("dry run: %+v, %v", gone, err)
	}
	if n, err := st.HLen(ctx, keys.Session(old)); err != nil || n == 0 {
		t.Fatalf("a dry run removed alice's settings: %d, %v", n, err)
	}
	if gone, err := Collect(ctx, st, keys, cutoff, false); err != nil || len(gone) != 1 || gone[0].Scope != old {
		t.Fatalf("collect: %+v, %v", gone, err)
	}
	for _, key := range []string{keys.ScopeHandle(old), keys.Handle(sh.Key), keys.ScopeOwner(old), keys.Usage(old)} {
		if _, err := st.Get(ctx, key); !errors.Is(err, statestore.ErrNotFound) {
			t.Errorf("%s after the collection: %v", key, err)
		}
	}
	for _, key := range []string{keys.Session(old), keys.CodeFiles(old), keys.Runs(old)} {
		if n, err := st.HLen(ctx, key); err != nil || n != 0 {
			t.Errorf("%s after the collection: %d entries, %v", key, n, err)
		}
	}
	alice, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[FileResult](t, alice, "read_code_file", map[string]any{"file_path": "a.py", "workspace": handle}); !res.IsError || textOf(res) != statusLine("rejected", unknownWorkspace(handle).Error()) {
		t.Errorf("alice's handle after the collection: %s", textOf(res))
	}
	if res, _ := callTool[FileResult](t, bob, "read_code_file", map[string]any{"file_path": "b.py"}); res.IsError || textOf(res) != "b = 1\n" {
		t.Errorf("bob's workspace, in use, after the collection: %s", textOf(res))
	}
	use, _ = Usage(ctx, st, keys)
	for _, u := range use {
		if u.Scope == old {
			t.Errorf("alice's workspace still listed: %+v", u)
		}
	}
}
