package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/oklog/ulid/v2"
)

// startNATSAt starts nats-server bin with JetStream on port of the loopback
// with its store in storeDir, stopped at cleanup, so that a test can kill it
// and start it again where its clients look for it.
func startNATSAt(t testing.TB, bin string, port int, storeDir string) *e2e.Proc {
	t.Helper()
	p, err := start(t)(e2e.Command{Name: "nats-server", Path: bin, Env: os.Environ(),
		Args: []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", storeDir}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.WaitFor(ctx, e2e.NATSReadyRe); err != nil {
		t.Fatal(err)
	}
	return p
}

var natsDisconnectedRe = regexp.MustCompile(`nats disconnected`)

// A call made while NATS is down is told its job id and that the job is not
// queued yet, not that it failed; the job runs once NATS is back, once, and
// get_job_result gives its result. (The publish used to wait in the NATS
// client's reconnect buffer: the call said "could not queue the job", with
// no id, and the job ran all the same when NATS came back.)
func TestClusterNATSDownDuringCall(t *testing.T) {
	t.Parallel()
	natsBin := natsServerBinary(t)
	rs := redistest.Start(t)
	port, store := freePort(t), t.TempDir()
	natsProc := startNATSAt(t, natsBin, port, store)

	common := []string{fmt.Sprintf("CODEXEC_NATS_URL=nats://127.0.0.1:%d", port), "CODEXEC_REDIS_URL=" + rs.URL(), "CODEXEC_ACK_WAIT=2s"}
	startWorker(t, "worker w1", codexecEnv(append(common, "CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
		"CODEXEC_WORKER_ID=w1", "CODEXEC_CONCURRENCY=1")...))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fe, url, err := e2e.StartFrontend(ctx, start(t), os.Args[0], codexecEnv(common...))
	if err != nil {
		t.Fatal(err)
	}
	c := httpClient(t, url)
	if res, er := call(t, c, "execute_code", map[string]any{"code": "print('up')"}); res.IsError {
		t.Fatalf("before the outage: %+v", er)
	}

	natsProc.Signal(syscall.SIGKILL)
	<-natsProc.Exited()
	if _, err := fe.WaitFor(ctx, natsDisconnectedRe); err != nil {
		t.Fatal(err)
	}
	notes := make(chan string, 16)
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if msg, _ := n.Params.AdditionalFields["message"].(string); n.Method == "notifications/progress" {
			notes <- msg
		}
	})
	code := "with open('runs.txt', 'a') as f:\n    f.write('ran\\n')\nprint('ran')\n"
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "execute_code", map[string]any{"code": code}
	req.Params.Meta = &mcp.Meta{ProgressToken: "outage-1"}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var er frontend.ExecResult
	if err := e2e.Decode(res, &er); err != nil {
		t.Fatal(err)
	}
	if !res.IsError || er.JobID == "" || !strings.Contains(er.Message, er.JobID) || !strings.Contains(er.Message, "not queued yet") {
		t.Fatalf("call during the outage: isError=%v %+v", res.IsError, er)
	}
	// The job id reached the client before the result, over Streamable HTTP.
	select {
	case first := <-notes:
		if !strings.HasPrefix(first, "job "+er.JobID+" ") {
			t.Errorf("first progress notification %q does not name job %s", first, er.JobID)
		}
	case <-time.After(10 * time.Second):
		t.Error("no progress notification")
	}

	startNATSAt(t, natsBin, port, store)
	var got frontend.ExecResult
	for deadline := time.Now().Add(time.Minute); ; {
		res, got = callWithin[frontend.ExecResult](t, c, "get_job_result", map[string]any{"job_id": er.JobID}, time.Minute)
		// internal: the frontend's NATS connection is not back yet.
		if (got.Status != "running" && got.Status != "internal") || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if res.IsError || got.Status != "ok" || got.Stdout != "ran\n" || got.JobID != er.JobID {
		t.Fatalf("get_job_result after the outage: isError=%v %+v", res.IsError, got)
	}
	// A second copy of the job would have been queued before this one.
	res, count := call(t, c, "execute_code", map[string]any{"code": "print(open('runs.txt').read().count('ran'))"})
	if res.IsError || count.Stdout != "1\n" {
		t.Fatalf("the job ran %q times (isError=%v %+v)", count.Stdout, res.IsError, count)
	}
}

// A job delivered past its deadline (a publish that reached the stream
// late) is not run: the worker stores an expired result, which is what
// get_job_result then shows.
func TestClusterLateJobExpires(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := broker.Open(ctx, broker.Config{URL: cl.natsURL})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now().UTC()
	job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "late-test",
		Code: "print('ran')", Filename: "late.py", TimeoutMS: 5000,
		EnqueuedAt: now.Add(-time.Minute), Deadline: now.Add(-time.Second)}
	if err := b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	res, err := b.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusExpired || res.Stdout != "" || res.ExitCode != -1 {
		t.Fatalf("a job delivered past its deadline: %+v", res)
	}
}
