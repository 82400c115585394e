package frontend

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// codeBytesRefusal is the start of a refusal by code_file_bytes of acme.
const codeBytesRefusal = `[rejected: quota code_file_bytes of tenant "acme" reached: its code files take `

// requireCodeBytes checks the code_file_bytes counter of tenant.
func requireCodeBytes(t *testing.T, f *Frontend, tenant string, want int64) {
	t.Helper()
	got, err := statestore.Usage(t.Context(), f.store, statestore.Quota{Key: f.cfg.Keys.TenantCodeBytes(wire.TenantKey(tenant))})
	if err != nil || got != want {
		t.Fatalf("code_file_bytes of %s: %d bytes counted (%v), want %d", tenant, got, err, want)
	}
}

// Tenant acme may keep 1000 bytes of code files: alice writes 600 in one
// workspace through each frontend at once, round after round, and exactly
// one of each pair lands, the other refused whole, naming the quota, its
// value and acme's usage; an append past it changes nothing; globex's
// files are not counted; deleting acme's file lets the other write.
func TestQuotaCodeFileBytesAcrossFrontends(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "code_file_bytes=1000")
	var alice [2]*client.Client // a workspace each: a protocol revision with sessions
	for i := range fx {
		c, err := fx[i].connectVersion(t, mcp.ProtocolVersion20251125, fx[i].tokens["alice"], "")
		if err != nil {
			t.Fatal(err)
		}
		alice[i] = c
	}
	content := strings.Repeat("x", 600)
	for round := range 10 {
		var results [2]FileResult
		var texts [2]string
		var wg sync.WaitGroup
		for i := range alice {
			wg.Go(func() {
				res, r := callTool[FileResult](t, alice[i], "initialize_code_file", map[string]any{"content": content, "filename": "big"})
				results[i], texts[i] = r, textOf(res)
			})
		}
		wg.Wait()
		won := -1
		for i, r := range results {
			switch {
			case r.Status == "ok" && won < 0:
				won = i
			case r.Status == "rejected" && strings.HasPrefix(texts[i], codeBytesRefusal+"600 bytes and this write adds 600 (the limit is 1000); nothing was done; free space with delete_code_file"):
			default:
				t.Fatalf("round %d: both writes or neither landed, or a refusal did not say why: %q", round, texts)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: neither write landed: %q", round, texts)
		}
		// The refusal names only what can be done: no tool removes a
		// workspace (it said "or by removing a workspace").
		if refusal := texts[1-won]; strings.Contains(refusal, "by removing a workspace") || !strings.Contains(refusal, "codexec admin gc") {
			t.Fatalf("round %d: the refusal says %q", round, refusal)
		}
		requireCodeBytes(t, fx[0].f, "acme", 600)
		lost := alice[1-won]
		if _, l := callTool[ListResult](t, lost, "list_code_files", nil); len(l.Files) != 0 {
			t.Fatalf("round %d: the refused write left files: %+v", round, l.Files)
		}
		res, r := callTool[FileResult](t, alice[won], "append_to_code_file", map[string]any{"file_path": "big.py", "content": strings.Repeat("y", 401)})
		if r.Status != "rejected" || !strings.HasPrefix(textOf(res), codeBytesRefusal+"600 bytes and this write adds 401 (the limit is 1000)") {
			t.Fatalf("round %d: an append past the quota: %s", round, textOf(res))
		}
		if _, r := callTool[FileResult](t, alice[won], "read_code_file", map[string]any{"file_path": "big.py"}); r.Size != 600 {
			t.Fatalf("round %d: the refused append changed the file: %d bytes", round, r.Size)
		}
		if _, r := callTool[FileResult](t, alice[won], "delete_code_file", map[string]any{"file_path": "big.py"}); r.Status != "ok" {
			t.Fatalf("round %d: delete: %+v", round, r)
		}
		requireCodeBytes(t, fx[1].f, "acme", 0)
	}

	carol, err := fx[1].connect(t, fx[1].tokens["carol"], "")
	if err != nil {
		t.Fatal(err)
	}
	if _, r := callTool[FileResult](t, alice[0], "initialize_code_file", map[string]any{"content": content, "filename": "a"}); r.Status != "ok" {
		t.Fatalf("alice's write under the quota: %+v", r)
	}
	if _, r := callTool[FileResult](t, carol, "initialize_code_file", map[string]any{"content": content, "filename": "c"}); r.Status != "ok" {
		t.Fatalf("globex's write, while acme is near its quota: %+v", r)
	}
	requireCodeBytes(t, fx[0].f, "acme", 600)
	requireCodeBytes(t, fx[0].f, "globex", 600)
	if fx[0].f.cfg.Quotas.For("acme", quota.CodeFileBytes) != 1000 {
		t.Fatal("the quota table lost the limit")
	}
}

// Collecting a workspace takes its code files out of its tenant's
// code_file_bytes and its working directory out of the tenant's
// working_dir_bytes; another tenant's figures stay.
func TestCollectSubtractsTenantBytes(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "code_file_bytes=1000,working_dir_bytes=1000")
	ctx, st, keys := t.Context(), fx[0].f.store, fx[0].f.cfg.Keys
	for _, p := range []string{"alice", "carol"} {
		c, err := fx[0].connect(t, fx[0].tokens[p], "")
		if err != nil {
			t.Fatal(err)
		}
		if _, r := callTool[FileResult](t, c, "initialize_code_file", map[string]any{"content": strings.Repeat("x", 600), "filename": "a"}); r.Status != "ok" {
			t.Fatalf("%s's write: %+v", p, r)
		}
	}
	use, err := Usage(ctx, st, keys)
	if err != nil || len(use) != 2 {
		t.Fatalf("usage: %+v, %v", use, err)
	}
	twoDays := time.Now().Add(-48 * time.Hour)
	for _, u := range use {
		// What a worker records after a job of each workspace.
		if _, err := st.(statestore.Tallier).Tally(ctx, keys.TenantWorkdirs(wire.TenantKey(u.Tenant)), u.Scope, 700); err != nil {
			t.Fatal(err)
		}
		if u.Tenant != "acme" {
			continue
		}
		// Acme's workspace was last used two days ago.
		owner, _ := json.Marshal(ScopeOwner{Tenant: u.Tenant, Principal: u.Principal, Seen: twoDays})
		if err := st.Set(ctx, keys.ScopeOwner(u.Scope), owner, 0); err != nil {
			t.Fatal(err)
		}
		if err := st.HSet(ctx, keys.Scopes(), u.Scope, fmt.Appendf(nil, "%d", twoDays.UnixMilli())); err != nil {
			t.Fatal(err)
		}
	}
	requireCodeBytes(t, fx[0].f, "acme", 600)
	if gone, err := Collect(ctx, st, keys, time.Now().Add(-time.Hour), false); err != nil || len(gone) != 1 || gone[0].Tenant != "acme" {
		t.Fatalf("collected %+v, %v; want acme's workspace", gone, err)
	}
	requireCodeBytes(t, fx[0].f, "acme", 0)
	requireCodeBytes(t, fx[0].f, "globex", 600)
	for tenant, want := range map[string]int64{"acme": 0, "globex": 700} {
		if got, err := statestore.TallySum(ctx, st, keys.TenantWorkdirs(wire.TenantKey(tenant))); err != nil || got != want {
			t.Fatalf("working_dir_bytes of %s after the collection: %d (%v), want %d", tenant, got, err, want)
		}
	}
}

// result_bytes: once the results a tenant's jobs stored within the
// results' retention take its quota (as its workers recorded them), its
// next job is refused, saying when the oldest counted hour leaves the
// window, and its batches are deferred; another tenant's jobs go, and
// hours past the retention do not count. Until 2026-12-04 nothing bounded
// what a tenant's results took in JetStream but its rate of jobs.
func TestQuotaResultBytes(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "result_bytes=1000")
	f := fx[0].f
	announceWorker(t, f)
	now := statestore.ResultHour(time.Now())
	put := func(tenant string, hour time.Time, n string) {
		t.Helper()
		if err := f.store.HSet(t.Context(), f.cfg.Keys.TenantResultBytes(wire.TenantKey(tenant)), statestore.ResultBytesField(hour, "w1"), []byte(n)); err != nil {
			t.Fatal(err)
		}
	}
	put("acme", now, "600")
	put("acme", now.Add(-time.Hour), "600")
	put("globex", now.Add(-2*f.broker.Retention()), "5000") // long expired
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	refusedByQuota(t, alice, quota.ResultBytes, "acme", "1000")
	res, br := callTool[BatchResult](t, alice, "submit_jobs", batchRowsArgs("results-batch-0123456789", 0, 1))
	if batchStatuses(br) != "deferred" || !strings.Contains(br.Jobs[0].Message, `quota result_bytes of tenant "acme" reached: the results of its jobs in the last 24h (how long results are kept) take 1200 bytes`) {
		t.Fatalf("a batch past result_bytes: %s", textOf(res))
	}
	carol, err := fx[1].connect(t, fx[1].tokens["carol"], "")
	if err != nil {
		t.Fatal(err)
	}
	fx[1].pending(t, carol)
}
