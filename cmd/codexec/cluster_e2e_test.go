package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore/redistest"
)

// natsServerBinary finds a real nats-server: $CODEXEC_NATS_SERVER, then
// bin/nats-server at the repository root (built by `make deps`), then PATH.
func natsServerBinary(t *testing.T) string {
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

type cluster struct {
	natsURL, redisURL, mcpURL string
	frontend                  *proc
	workers                   []*proc
	// env is what every codexec process of the cluster is started with.
	env       []string
	frontends []*proc
}

// startCluster runs the multi-process topology of the Procfile: a real
// nats-server with JetStream, a real redis-server, one frontend on HTTP and
// n workers, each its own process.
func startCluster(t *testing.T, workers int, workerArgs ...string) *cluster {
	t.Helper()
	args := make([][]string, workers)
	for i := range args {
		args[i] = workerArgs
	}
	return startClusterArgs(t, args)
}

// startClusterArgs is startCluster with each worker's own arguments.
func startClusterArgs(t *testing.T, perWorker [][]string) *cluster {
	t.Helper()
	workers := len(perWorker)
	natsBin := natsServerBinary(t)
	rs := redistest.Start(t)
	port := freePort(t)
	nats := startProc(t, os.Environ(), natsBin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", t.TempDir())
	nats.waitFor(t, regexp.MustCompile(`Server is ready`), time.Minute)

	cl := &cluster{natsURL: fmt.Sprintf("nats://127.0.0.1:%d", port), redisURL: rs.URL()}
	common := []string{"CODEXEC_NATS_URL=" + cl.natsURL, "CODEXEC_REDIS_URL=" + cl.redisURL, "CODEXEC_ACK_WAIT=2s"}
	for i := 0; i < workers; i++ {
		env := codexecEnv(append(common, "CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
			fmt.Sprintf("CODEXEC_WORKER_ID=w%d", i+1), "CODEXEC_CONCURRENCY=1")...)
		w := startProc(t, env, os.Args[0], append([]string{"worker"}, perWorker[i]...)...)
		w.waitFor(t, regexp.MustCompile(`worker ready`), 2*time.Minute)
		cl.workers = append(cl.workers, w)
	}
	cl.env = codexecEnv(common...)
	cl.mcpURL = cl.addFrontend(t)
	cl.frontend = cl.frontends[0]
	return cl
}

// addFrontend starts one more frontend of the cluster, on HTTP, and returns
// its MCP URL.
func (cl *cluster) addFrontend(t *testing.T) string {
	t.Helper()
	p := startProc(t, cl.env, os.Args[0], "frontend", "--http", "127.0.0.1:0")
	cl.frontends = append(cl.frontends, p)
	return p.waitFor(t, urlRe, time.Minute)
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
