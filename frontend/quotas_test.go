package frontend

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/client"
)

// startQuotaHTTP starts two frontends of one cluster (one JetStream, one
// real redis-server) behind static tokens, with the quotas limits for
// every tenant: alice is of tenant acme, carol of tenant globex.
func startQuotaHTTP(t *testing.T, limits string) [2]*authFixture {
	t.Helper()
	e := brokertest.StartNATS(t)
	b := brokertest.Open(t, e, broker.Config{})
	rs := redistest.Start(t)
	tokens := map[string]string{}
	var lines []string
	for p, tenant := range map[string]string{"alice": "acme", "carol": "globex"} {
		token, line, err := auth.NewToken(tenant, p)
		if err != nil {
			t.Fatal(err)
		}
		tokens[p] = token
		lines = append(lines, line)
	}
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := auth.LoadTokens(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := quota.ParseLimits(limits)
	if err != nil {
		t.Fatal(err)
	}
	table, err := quota.NewTable(l, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var fxs [2]*authFixture
	for i := range fxs {
		fx := &authFixture{b: b, tokens: tokens}
		f, err := New(Config{Access: auth.Policy{Authenticator: a, Loopback: true}, Quotas: table, FairShare: -1}, b, openRedis(t, rs))
		if err != nil {
			t.Fatal(err)
		}
		fx.f = f
		h, mcpHTTP := f.HTTPHandler()
		srv := httptest.NewServer(h)
		t.Cleanup(func() {
			_ = mcpHTTP.Shutdown(context.Background())
			srv.CloseClientConnections()
			srv.Close()
		})
		fx.url = srv.URL + "/mcp"
		fxs[i] = fx
	}
	return fxs
}

// pending submits a job of c as submitUnanswered; it is answered at the
// end of the test at the latest.
func (fx *authFixture) pending(t *testing.T, c *client.Client) string {
	t.Helper()
	id := fx.submitUnanswered(t, c)
	t.Cleanup(func() {
		if rec, err := fx.b.GetJobRecord(context.Background(), id); err == nil {
			_, _ = fx.b.PutResult(context.Background(), &wire.Result{JobID: id, Scope: rec.Scope, Status: wire.StatusOK})
		}
	})
	return id
}

// answer puts a result for each job, so that the calls waiting on them end.
func answer(t *testing.T, b *broker.Broker, jobs ...string) {
	t.Helper()
	for _, id := range jobs {
		rec, err := b.GetJobRecord(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.PutResult(t.Context(), &wire.Result{JobID: id, Scope: rec.Scope, Status: wire.StatusOK}); err != nil {
			t.Fatal(err)
		}
	}
}

var quotaRe = regexp.MustCompile(`^\[rejected: quota (\S+) of tenant "(\w+)" reached: .*\(the limit is (\d+)\); nothing was done; try again .*in [0-9hms]+\)?\]$`)

// refusedByQuota calls execute_code and checks it is refused by quota
// name of tenant at limit, with nothing recorded in the session.
func refusedByQuota(t *testing.T, c *client.Client, name, tenant, limit string) {
	t.Helper()
	_, before := callTool[ListResult](t, c, "list_code_files", nil)
	res, er := callTool[ExecResult](t, c, "execute_code", map[string]any{"code": "print(1)"})
	m := quotaRe.FindStringSubmatch(textOf(res))
	if !res.IsError || er.Status != "rejected" || er.JobID != "" || m == nil || m[1] != name || m[2] != tenant || m[3] != limit {
		t.Fatalf("want a refusal by quota %s=%s of %s: %s", name, limit, tenant, textOf(res))
	}
	if _, after := callTool[ListResult](t, c, "list_code_files", nil); len(after.Runs) != len(before.Runs) {
		t.Fatalf("a refused call recorded a run: %d runs, then %d", len(before.Runs), len(after.Runs))
	}
}

// Two jobs of acme at once, one through each frontend: a third, through
// either, is refused; globex's job is not; once one of acme's jobs has its
// result, acme's next job goes.
func TestQuotaJobsAcrossFrontends(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "jobs=2")
	var alice [2]*client.Client
	for i := range fx {
		c, err := fx[i].connect(t, fx[i].tokens["alice"], "")
		if err != nil {
			t.Fatal(err)
		}
		alice[i] = c
	}
	first := fx[0].pending(t, alice[0])
	second := fx[1].pending(t, alice[1])
	refusedByQuota(t, alice[0], quota.Jobs, "acme", "2")
	refusedByQuota(t, alice[1], quota.Jobs, "acme", "2")

	carol, err := fx[1].connect(t, fx[1].tokens["carol"], "")
	if err != nil {
		t.Fatal(err)
	}
	other := fx[1].pending(t, carol)

	answer(t, fx[0].b, first)
	waitQuotaMembers(t, fx[0].f, quota.Jobs, "acme", 1)
	third := fx[1].pending(t, alice[1])
	_, _, _ = second, other, third
}

// waitQuotaMembers waits until the set of quota name of tenant has n
// members: the place of a job whose result came is given back as its
// call returns, which the test does not see.
func waitQuotaMembers(t *testing.T, f *Frontend, name, tenant string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := f.store.Members(t.Context(), f.cfg.Keys.Quota(name, wire.TenantKey(tenant)))
		if err != nil {
			t.Fatal(err)
		}
		if len(m) == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota %s of %s: %d members, want %d", name, tenant, len(m), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// At most three jobs of acme a minute, through both frontends together.
func TestQuotaJobsPerMinuteAcrossFrontends(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "jobs_per_minute=3")
	for i := range 3 {
		c, err := fx[i%2].connect(t, fx[i%2].tokens["alice"], "")
		if err != nil {
			t.Fatal(err)
		}
		fx[i%2].pending(t, c)
	}
	for i := range fx {
		c, err := fx[i].connect(t, fx[i].tokens["alice"], "")
		if err != nil {
			t.Fatal(err)
		}
		refusedByQuota(t, c, quota.JobsPerMinute, "acme", "3")
	}
	carol, err := fx[0].connect(t, fx[0].tokens["carol"], "")
	if err != nil {
		t.Fatal(err)
	}
	fx[0].pending(t, carol)
}

// At most two workspaces with a handle per tenant, across frontends; the
// third is refused and makes nothing.
func TestQuotaWorkspacesAcrossFrontends(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "workspaces=2")
	var handles []string
	for i := range 2 {
		c, err := fx[i].connect(t, fx[i].tokens["alice"], "")
		if err != nil {
			t.Fatal(err)
		}
		res, ws := callTool[WorkspaceResult](t, c, "new_workspace", nil)
		if res.IsError {
			t.Fatal(textOf(res))
		}
		handles = append(handles, ws.Workspace)
	}
	c, err := fx[1].connect(t, fx[1].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"new_workspace", "workspace_info"} {
		res, ws := callTool[WorkspaceResult](t, c, tool, nil)
		if !res.IsError || ws.Workspace != "" || !strings.Contains(textOf(res), `quota workspaces of tenant "acme" reached: 2 workspaces (the limit is 2)`) {
			t.Fatalf("%s past the quota: %s", tool, textOf(res))
		}
		// A call over a quota is rejected, as the docs say, not an
		// internal failure to retry.
		if ws.Status != "rejected" || strings.Contains(textOf(res), "cannot record") {
			t.Fatalf("%s past the quota: status %q: %s", tool, ws.Status, textOf(res))
		}
	}
	// The two made are still reached.
	if res, ws := callTool[WorkspaceResult](t, c, "workspace_info", map[string]any{"workspace": handles[0]}); res.IsError || ws.Workspace != handles[0] {
		t.Fatalf("a workspace within the quota: %s", textOf(res))
	}
	carol, err := fx[0].connect(t, fx[0].tokens["carol"], "")
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := callTool[WorkspaceResult](t, carol, "new_workspace", nil); res.IsError {
		t.Fatalf("another tenant's workspace: %s", textOf(res))
	}
}
