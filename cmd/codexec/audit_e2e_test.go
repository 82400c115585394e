package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/wire"
)

// Every job of a cluster leaves an audit record: one "job audit" log line
// of the worker, and a record that `codexec admin audit` exports per
// tenant as JSON Lines, naming tenant, principal, workspace, job id, code
// digest, environment, status and duration.
func TestClusterAuditExport(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	carol, lineC, _ := auth.NewToken("globex", "carol")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA, lineC)
	cl := startCluster(t, 1)
	cl.env = append(cl.env, "CODEXEC_AUTH=tokens", "CODEXEC_AUTH_TOKENS="+tokens)
	url := cl.addFrontend(t)

	a := connected(t, url, alice)
	codes := map[string]string{} // job id → code
	statuses := map[string]string{}
	for _, code := range []string{"print('a')", "1/0"} {
		_, er := call(t, a, "execute_code", map[string]any{"code": code})
		if er.JobID == "" {
			t.Fatalf("no job id: %+v", er)
		}
		codes[er.JobID], statuses[er.JobID] = code, er.Status
	}
	if _, er := call(t, connected(t, url, carol), "execute_code", map[string]any{"code": "print('c')"}); er.Status != "ok" {
		t.Fatalf("carol's job: %+v", er)
	}

	// The worker appends a record after it has stored the result and
	// acked the job: the export may lag the answers a moment.
	var recs []wire.AuditRecord
	for deadline := time.Now().Add(30 * time.Second); ; {
		recs = auditExport(t, cl, "--tenant", "acme")
		if len(recs) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(recs) != 2 {
		t.Fatalf("acme's audit: %d records, want 2: %+v", len(recs), recs)
	}
	for _, r := range recs {
		code, ok := codes[r.JobID]
		if !ok || r.Tenant != "acme" || r.Principal != "alice" || !wire.ValidScope(r.Workspace) || r.Workspace != recs[0].Workspace ||
			r.CodeSHA256 != sha(code) || string(r.Status) != statuses[r.JobID] || r.DurationMS <= 0 || r.EnvID == "" ||
			r.WorkerID != "w1" || r.Kind != wire.KindExecute {
			t.Errorf("audit record %+v of job %q (status %s)", r, code, statuses[r.JobID])
		}
		if !regexp.MustCompile(`msg="job audit" .*job=` + r.JobID + ` .*tenant=acme principal=alice`).MatchString(cl.workers[0].Out.String()) {
			t.Errorf("no audit log line of job %s", r.JobID)
		}
	}
	if all := auditExport(t, cl, "--all-tenants"); len(all) != 3 {
		t.Errorf("every tenant's audit: %d records, want 3", len(all))
	}
}

// auditExport runs `codexec admin audit` on the cluster's Redis.
func auditExport(t *testing.T, cl *cluster, args ...string) []wire.AuditRecord {
	t.Helper()
	out := runCodexec(t, codexecEnv(), append([]string{"admin", "audit", "--redis", cl.redisURL}, args...)...)
	var recs []wire.AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var r wire.AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}
