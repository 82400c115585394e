package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend/auth"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// Two frontends of one cluster (real nats-server, redis-server, worker
// processes) with --quota jobs=1: while a job of tenant acme runs, sent
// through one frontend, acme's next job is refused by the other, naming
// the quota, its value and when to try again; tenant globex's job runs;
// once acme's job is over, acme's next job runs.
func TestClusterQuotaAcrossFrontends(t *testing.T) {
	t.Parallel()
	alice, lineA, _ := auth.NewToken("acme", "alice")
	carol, lineC, _ := auth.NewToken("globex", "carol")
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, lineA, lineC)
	cl := startCluster(t, 2)
	cl.env = append(cl.env, "CODEXEC_AUTH=tokens", "CODEXEC_AUTH_TOKENS="+tokens, "CODEXEC_QUOTA=jobs=1")
	one, two := cl.addFrontend(t), cl.addFrontend(t)

	a1, err := connectAs(one, alice)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a1.Close() })
	started := make(chan struct{}, 1)
	a1.OnNotification(func(n mcp.JSONRPCNotification) {
		if msg, _ := n.Params.AdditionalFields["message"].(string); strings.Contains(msg, "job ") {
			select {
			case started <- struct{}{}:
			default:
			}
		}
	})
	done := make(chan string, 1)
	go func() {
		req := mcp.CallToolRequest{}
		req.Params.Name, req.Params.Arguments = "execute_code", map[string]any{"code": "import time; time.sleep(4); print('first')"}
		req.Params.Meta = &mcp.Meta{ProgressToken: "first"}
		res, err := a1.CallTool(context.Background(), req)
		if err != nil {
			done <- err.Error()
			return
		}
		done <- text(res)
	}()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("acme's first job was not submitted")
	}

	a2 := connected(t, two, alice)
	res, er := call(t, a2, "execute_code", map[string]any{"code": "print('second')"})
	if !res.IsError || er.Status != "rejected" || er.JobID != "" ||
		!strings.Contains(er.Message, `quota jobs of tenant "acme" reached: 1 jobs queued or running at once (the limit is 1); nothing was done; try again when one of them finishes`) {
		t.Fatalf("acme's second job, through the other frontend: %s", text(res))
	}
	if _, er := call(t, connected(t, two, carol), "execute_code", map[string]any{"code": "print('globex')"}); er.Stdout != "globex\n" {
		t.Fatalf("globex's job: %+v", er)
	}
	if out := <-done; !strings.Contains(out, "first") {
		t.Fatalf("acme's first job: %s", out)
	}
	if _, er := call(t, a2, "execute_code", map[string]any{"code": "print('second')"}); er.Stdout != "second\n" {
		t.Fatalf("acme's job after the first ended: %+v", er)
	}
}

func connected(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := connectAs(url, token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}
