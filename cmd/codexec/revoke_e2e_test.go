package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend/auth"
)

// A job whose frontend died in the middle of the call (no call waits for
// it any more, so no frontend cancels it) stops once the operator revokes
// its tenant: its worker reads the revocation itself and stops the job
// with its processes, as a cancelled one, and says why.
func TestClusterRevokeStopsOrphanedJob(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA)
	cl := startCluster(t, 1)
	cl.env = append(cl.env, "CODEXEC_AUTH=tokens", "CODEXEC_AUTH_TOKENS="+tokens)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fe, url, err := e2e.StartFrontend(ctx, start(t), os.Args[0], cl.env)
	if err != nil {
		t.Fatal(err)
	}
	a := connected(t, url, alice)
	go func() {
		// Its answer never comes: the frontend dies first.
		_, _ = e2e.Call(context.Background(), a, "execute_code", map[string]any{
			"code": "import time\nprint('start', flush=True)\ntime.sleep(500)", "timeout_seconds": 550}, 10*time.Minute)
	}()
	w := cl.workers[0]
	w.waitFor(t, jobStarted, time.Minute)
	fe.Kill()
	<-fe.Exited()

	out := runCodexec(t, codexecEnv(), "admin", "revoke", "--redis", cl.redisURL, "--tenant", "acme")
	if !strings.Contains(out, "every worker stops its running jobs") {
		t.Fatalf("admin revoke:\n%s", out)
	}
	w.waitFor(t, regexp.MustCompile(`msg="job of a revoked identity stopped"`), 2*time.Minute)
}
