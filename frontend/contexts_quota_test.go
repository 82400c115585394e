package frontend

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/wire"
)

// A call in a context runs code as a job does, and counts as one against
// its tenant's quotas of jobs: with acme at its quota (one job queued, at
// jobs=1 or jobs_per_minute=1), alice's call in her context is refused
// with the quota's message, before any worker is asked. Before, it went to
// the context's worker whatever the quotas said.
func TestQuotaJobsCountCallsInContexts(t *testing.T) {
	t.Parallel()
	for _, limits := range []string{"jobs=1", "jobs_per_minute=1"} {
		t.Run(limits, func(t *testing.T) {
			t.Parallel()
			fx := startQuotaHTTP(t, limits)
			alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
			if err != nil {
				t.Fatal(err)
			}
			advertiseWorker(t, fx[0].f)
			fx[0].pending(t, alice)
			// A context of alice's, on a worker that answers nothing.
			scope := "p-" + digest(identityPart(auth.Identity{Tenant: "acme", Principal: "alice"}))
			data, _ := json.Marshal(wire.ContextRecord{V: wire.Version, Worker: "w-silent", EnvID: "default", CreatedAt: time.Now()})
			if err := fx[0].f.store.HSet(t.Context(), fx[0].f.cfg.Keys.Contexts(scope), "c1", data); err != nil {
				t.Fatal(err)
			}
			res, er := callTool[ExecResult](t, alice, "run_in_context", map[string]any{"context_id": "c1", "code": "print(1)"})
			name := quota.Jobs
			if limits == "jobs_per_minute=1" {
				name = quota.JobsPerMinute
			}
			if m := quotaRe.FindStringSubmatch(textOf(res)); !res.IsError || er.Status != "rejected" || m == nil || m[1] != name || m[2] != "acme" {
				t.Fatalf("alice's call in a context with acme at its quota %s: %s", limits, textOf(res))
			}
		})
	}
}
