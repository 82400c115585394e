package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/statestore/redistest"
)

// natsServerBinary finds a real nats-server: $CODEXEC_NATS_SERVER, then
// bin/nats-server at the repository root (built by `make deps`), then PATH.
func natsServerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CODEXEC_NATS_SERVER"); p != "" {
		return p
	}
	if abs, err := filepath.Abs("../../bin/nats-server"); err == nil {
		if _, err := os.Stat(abs); err == nil {
			return abs
		}
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("nats-server not found: run `make deps` (it builds bin/nats-server)")
	}
	t.Skip("nats-server not found: run `make deps` (it builds bin/nats-server)")
	return ""
}

// startNATS starts nats-server bin with JetStream, stopped at cleanup, and
// returns its URL and port.
func startNATS(t testing.TB, bin string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url, port, err := e2e.StartNATS(ctx, start(t), bin, os.Environ(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return url, port
}

// startWorker starts this binary as `codexec worker args...` with env,
// stopped at cleanup, and waits until it is ready.
func startWorker(t testing.TB, name string, env []string, args ...string) *e2e.Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w, err := e2e.StartWorker(ctx, start(t), name, os.Args[0], env, args...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// startFrontend starts this binary as `codexec frontend` on HTTP with env,
// stopped at cleanup, and returns its MCP URL.
func startFrontend(t testing.TB, env []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, url, err := e2e.StartFrontend(ctx, start(t), os.Args[0], env)
	if err != nil {
		t.Fatal(err)
	}
	return url
}

type cluster struct {
	natsURL, redisURL, mcpURL string
	redis                     *redistest.Server
	workers                   []*proc
	// env is what every codexec process of the cluster is started with.
	env []string
}

// startCluster runs the multi-process topology of the Procfile: a real
// nats-server with JetStream, a real redis-server, one frontend on HTTP and
// n workers, each its own process.
func startCluster(t testing.TB, workers int, workerArgs ...string) *cluster {
	t.Helper()
	args := make([][]string, workers)
	for i := range args {
		args[i] = workerArgs
	}
	return startClusterArgs(t, args)
}

// startClusterArgs is startCluster with each worker's own arguments.
func startClusterArgs(t testing.TB, perWorker [][]string) *cluster {
	t.Helper()
	workers := len(perWorker)
	natsBin := natsServerBinary(t)
	rs := redistest.Start(t)
	natsURL, _ := startNATS(t, natsBin)

	cl := &cluster{natsURL: natsURL, redisURL: rs.URL(), redis: rs}
	common := []string{"CODEXEC_NATS_URL=" + cl.natsURL, "CODEXEC_REDIS_URL=" + cl.redisURL, "CODEXEC_ACK_WAIT=2s"}
	for i := 0; i < workers; i++ {
		env := codexecEnv(append(common, "CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
			fmt.Sprintf("CODEXEC_WORKER_ID=w%d", i+1), "CODEXEC_CONCURRENCY=1")...)
		cl.workers = append(cl.workers, &proc{startWorker(t, fmt.Sprintf("worker w%d", i+1), env, perWorker[i]...)})
	}
	cl.env = codexecEnv(common...)
	cl.mcpURL = cl.addFrontend(t)
	return cl
}

// addFrontend starts one more frontend of the cluster, on HTTP, and returns
// its MCP URL.
func (cl *cluster) addFrontend(t testing.TB) string {
	t.Helper()
	return startFrontend(t, cl.env)
}

func TestClusterExecute(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	c := httpClient(t, cl.mcpURL)

	seen := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, er := call(t, c, "execute_code", map[string]any{"code": "import time; time.sleep(0.3); print('hello')"})
			if res.IsError || er.Stdout != "hello\n" {
				t.Errorf("isError=%v %+v", res.IsError, er)
			}
			mu.Lock()
			seen[er.WorkerID] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if !seen["w1"] || !seen["w2"] {
		t.Errorf("jobs did not spread over both workers: %v", seen)
	}
	res, er := call(t, c, "execute_code", map[string]any{"code": "1/0"})
	if !res.IsError || !strings.Contains(er.Stderr, "ZeroDivisionError") {
		t.Fatalf("isError=%v %+v", res.IsError, er)
	}
}

// A worker killed in the middle of a job does not lose it: another worker
// runs it once the lease lapses, and the client gets the result.
func TestClusterWorkerKilledMidJob(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	c := httpClient(t, cl.mcpURL)

	type out struct {
		isError bool
		worker  string
		stdout  string
		status  string
		message string
		stderr  string
	}
	results := make(chan out, 2)
	for i := 0; i < 2; i++ {
		go func() {
			res, er := call(t, c, "execute_code", map[string]any{"code": "import time, os\nprint('start', flush=True)\ntime.sleep(4)\nprint('end')"})
			results <- out{res.IsError, er.WorkerID, er.Stdout, er.Status, er.Message, er.Stderr}
		}()
	}
	// Both workers (concurrency 1) are now busy or about to be: wait until
	// w1 has a job, then kill it without a chance to clean up.
	cl.workers[0].waitFor(t, regexp.MustCompile(`msg="job started"`), time.Minute)
	cl.workers[0].signal(syscall.SIGKILL)

	for i := 0; i < 2; i++ {
		select {
		case r := <-results:
			if r.isError || r.stdout != "start\nend\n" || r.worker != "w2" {
				t.Errorf("after w1 was killed: %+v", r)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("a client was left hanging after its worker died")
		}
	}
}

// With no live worker the client gets a clear error at once, not a hang.
func TestClusterNoWorker(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 0)
	c := httpClient(t, cl.mcpURL)
	start := time.Now()
	res, er := call(t, c, "execute_code", map[string]any{"code": "print(1)"})
	if !res.IsError || !strings.Contains(er.Message, "no live worker") {
		t.Fatalf("isError=%v %+v", res.IsError, er)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %s", d)
	}
}
