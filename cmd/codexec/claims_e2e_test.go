package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// natsAt starts nats-server bin with JetStream on port of the loopback,
// its store in dir, and waits until it is ready; it is stopped at cleanup.
// Started again with the same port and dir, it is the same server after a
// restart.
func natsAt(t *testing.T, bin string, port int, dir string) *e2e.Proc {
	t.Helper()
	p, err := start(t)(e2e.Command{Name: "nats-server", Path: bin, Env: os.Environ(),
		Args: []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", dir}})
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

// claimCluster is NATS, Redis and n workers of concurrency conc, each
// worker started with extra settings, and a broker of the test's own to
// publish jobs and read results.
type claimCluster struct {
	natsBin, natsDir string
	natsPort         int
	nats             *e2e.Proc
	workers          []*proc
	b                *broker.Broker
}

func startClaimCluster(t *testing.T, n, conc int, extra ...string) *claimCluster {
	t.Helper()
	cc := &claimCluster{natsBin: natsServerBinary(t), natsDir: t.TempDir()}
	rs := redistest.Start(t)
	port, err := e2e.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cc.natsPort = port
	cc.nats = natsAt(t, cc.natsBin, port, cc.natsDir)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for i := range n {
		env := codexecEnv(append([]string{"CODEXEC_NATS_URL=" + url, "CODEXEC_REDIS_URL=" + rs.URL(),
			"CODEXEC_DATA_DIR=" + t.TempDir(), "CODEXEC_VENV=" + venvFor(t),
			fmt.Sprintf("CODEXEC_WORKER_ID=w%d", i+1), fmt.Sprintf("CODEXEC_CONCURRENCY=%d", conc)}, extra...)...)
		cc.workers = append(cc.workers, &proc{startWorker(t, fmt.Sprintf("worker w%d", i+1), env)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc.b, err = broker.Open(ctx, broker.Config{URL: url, Name: t.Name(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.b.Close)
	return cc
}

// publish publishes an execute job of code and returns it.
func (cc *claimCluster) publish(t *testing.T, ctx context.Context, code string) *wire.Job {
	t.Helper()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "claims-e2e",
		Code: code, Filename: "main.py", TimeoutMS: 60000, Deadline: time.Now().Add(2 * time.Minute).UTC(),
	}
	if err := cc.b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	return job
}

var jobStartedRe = regexp.MustCompile(`msg="job started"`)

// NATS is killed while jobs run on two workers and started again after
// their leases lapsed: every job still runs exactly once. Each job appends
// its id to a file as its first act, so a second start of any job shows as
// a second line. Before claims, the worker that reconnected first got the
// lapsed jobs back before their first runs had stored a result, and ran
// them again.
func TestClusterNATSRestartRunsJobsOnce(t *testing.T) {
	t.Parallel()
	// Unsandboxed, so that the jobs can all write to one file of the test's.
	cc := startClaimCluster(t, 2, 4, "CODEXEC_SANDBOX=off", "CODEXEC_ACK_WAIT=2s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runs := filepath.Join(t.TempDir(), "runs.log")

	const n = 4
	jobs := make([]*wire.Job, n)
	for i := range jobs {
		jobs[i] = cc.publish(t, ctx, fmt.Sprintf(
			"import time\nwith open(%q, 'a') as f:\n    f.write(%q + '\\n')\ntime.sleep(12)\nprint('done')\n", runs, fmt.Sprint(i)))
	}
	// Every job has started: kill NATS under them, keep it down past their
	// leases, and start it again on its store.
	waitLines(ctx, t, runs, n)
	cc.nats.Signal(syscall.SIGKILL)
	<-cc.nats.Exited()
	time.Sleep(4 * time.Second) // two leases of 2s, no InProgress getting through
	cc.nats = natsAt(t, cc.natsBin, cc.natsPort, cc.natsDir)

	for i, job := range jobs {
		res, err := cc.b.WaitResult(ctx, job.ID)
		if err != nil {
			t.Fatalf("job %d: %v", i, err)
		}
		if res.Status != wire.StatusOK || res.Stdout != "done\n" {
			t.Errorf("job %d: %s %q %q", i, res.Status, res.Stdout, res.Stderr)
		}
	}
	// Redeliveries arriving late would start jobs again now: give them a
	// lease and a poll to show up.
	time.Sleep(3 * time.Second)
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, line := range strings.Fields(string(data)) {
		count[line]++
	}
	for i := range n {
		if c := count[fmt.Sprint(i)]; c != 1 {
			t.Errorf("job %d started %d times, want 1 (runs: %q)", i, c, data)
		}
	}
}

// waitLines waits until file has at least n lines.
func waitLines(ctx context.Context, t *testing.T, file string, n int) {
	t.Helper()
	for {
		data, _ := os.ReadFile(file)
		if strings.Count(string(data), "\n") >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("only %q in %s", data, file)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// A worker killed with SIGKILL in the middle of a job: the job runs to
// completion on the other worker, started within a few seconds of the
// death, with the default lease. It once waited out a whole lease of 30s.
// The figure is logged; the bound asserted (20s) only shows that the
// 30-second lease is gone.
func TestClusterKilledWorkerJobMovesSoon(t *testing.T) {
	t.Parallel()
	cc := startClaimCluster(t, 2, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job := cc.publish(t, ctx, "import time\nprint('start', flush=True)\ntime.sleep(5)\nprint('end')\n")

	victim := cc.whoStarted(ctx, t)
	cc.workers[victim].Signal(syscall.SIGKILL)
	killed := time.Now()
	<-cc.workers[victim].Exited()

	res, err := cc.b.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	other := fmt.Sprintf("w%d", 2-victim)
	if res.Status != wire.StatusOK || res.Stdout != "start\nend\n" || res.WorkerID != other {
		t.Fatalf("after w%d was killed: %+v", victim+1, res)
	}
	after := res.StartedAt.Sub(killed)
	t.Logf("the job started again on %s %.1f s after w%d was killed (attempt %d)", other, after.Seconds(), victim+1, res.Attempt)
	if after > 20*time.Second {
		t.Errorf("the job started again %s after its worker died: the dead worker's lease was waited out", after)
	}
}

// whoStarted waits until a worker logs that it started a job and returns
// its index.
func (cc *claimCluster) whoStarted(ctx context.Context, t *testing.T) int {
	t.Helper()
	for {
		for i, w := range cc.workers {
			if jobStartedRe.MatchString(w.Out.String()) {
				return i
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("no worker started the job")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
