package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
)

// Graceful stop, Redis outages and the log format, each with real
// processes: a real nats-server and redis-server, codexec roles as
// processes of their own, real signals.

// sleeper prints, sleeps secs seconds, prints again.
func sleeper(secs int) map[string]any {
	return map[string]any{"code": "import time\nprint('start', flush=True)\ntime.sleep(" + strconv.Itoa(secs) + ")\nprint('end')"}
}

// term sends SIGTERM to the process alone, as a supervisor stopping a
// service does (not to its group: the job's processes are the worker's to
// end).
func term(p *e2e.Proc) { _ = syscall.Kill(p.Pid(), syscall.SIGTERM) }

type callOut struct {
	res *frontend.ExecResult
	err bool
}

// callAsync makes call in the background.
func callAsync(call func() (bool, frontend.ExecResult)) <-chan callOut {
	out := make(chan callOut, 1)
	go func() {
		isErr, er := call()
		out <- callOut{&er, isErr}
	}()
	return out
}

// exits waits for p to exit.
func exits(t *testing.T, p *e2e.Proc, within time.Duration) {
	t.Helper()
	select {
	case <-p.Exited():
	case <-time.After(within):
		t.Fatalf("%s still runs %s after SIGTERM", p.Name, within)
	}
}

var jobStarted = regexp.MustCompile(`msg="job started"`)

// A worker told to stop mid-job finishes the job within its grace period,
// stores its result and acks it, then exits.
func TestClusterWorkerStopFinishesJob(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 1, "--stop-grace", "1m")
	c := httpClient(t, cl.mcpURL)
	results := callAsync(func() (bool, frontend.ExecResult) {
		res, er := call(t, c, "execute_code", sleeper(3))
		return res.IsError, er
	})
	w := cl.workers[0]
	w.waitFor(t, jobStarted, time.Minute)
	term(w.Proc)
	r := <-results
	if r.err || r.res.Stdout != "start\nend\n" || r.res.WorkerID != "w1" {
		t.Fatalf("the job of a worker stopped mid-job: %+v", r.res)
	}
	exits(t, w.Proc, time.Minute)
	if out := w.Out.String(); !strings.Contains(out, `msg="worker stopped"`) || strings.Contains(out, "interrupted") {
		t.Fatalf("worker log:\n%s", out)
	}
}

// Past its grace period a stopping worker kills the job and hands it back:
// another worker runs it, and the result is that worker's, the killed
// attempt having stored none (results are create-only: had it stored one,
// the client would see it).
func TestClusterWorkerStopPastGrace(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2, "--stop-grace", "1s")
	c := httpClient(t, cl.mcpURL)
	results := callAsync(func() (bool, frontend.ExecResult) {
		res, er := call(t, c, "execute_code", sleeper(8))
		return res.IsError, er
	})
	// Whichever worker took the job is stopped.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	first := make(chan *proc, 2)
	for _, w := range cl.workers {
		go func() {
			if _, err := w.WaitFor(ctx, jobStarted); err == nil {
				first <- w
			}
		}()
	}
	var stopped *proc
	select {
	case stopped = <-first:
	case <-ctx.Done():
		t.Fatal("no worker started the job")
	}
	term(stopped.Proc)
	exits(t, stopped.Proc, time.Minute)
	r := <-results
	want := "w1"
	if stopped == cl.workers[0] {
		want = "w2"
	}
	if r.err || r.res.Stdout != "start\nend\n" || r.res.WorkerID != want {
		t.Fatalf("a job handed back past the grace period: %+v (want it run by %s)", r.res, want)
	}
	if out := stopped.Out.String(); !strings.Contains(out, "job interrupted by shutdown") {
		t.Fatalf("stopped worker's log:\n%s", out)
	}
}

// A frontend told to stop while a call is open answers it before it
// exits.
func TestClusterFrontendStopFinishesCall(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fe, url, err := e2e.StartFrontend(ctx, start(t), os.Args[0], append(cl.env, "CODEXEC_STOP_GRACE=1m"))
	if err != nil {
		t.Fatal(err)
	}
	c := httpClient(t, url)
	results := callAsync(func() (bool, frontend.ExecResult) {
		res, er := call(t, c, "execute_code", sleeper(7))
		return res.IsError, er
	})
	cl.workers[0].waitFor(t, jobStarted, time.Minute)
	term(fe)
	r := <-results
	if r.err || r.res.Stdout != "start\nend\n" {
		t.Fatalf("the call open when its frontend was stopped: %+v", r.res)
	}
	exits(t, fe, time.Minute)
}

// The same on stdio: `codexec dev` told to stop answers the open call on
// stdout, then exits; every line it wrote on stderr is in the log format
// (text).
func TestDevStdioStopFinishesCall(t *testing.T) {
	t.Parallel()
	env := codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t), "CODEXEC_STOP_GRACE=1m")
	c, p := stdio(t, e2e.Command{Name: "codexec dev", Path: os.Args[0], Args: []string{"dev"}, Env: env}, nil)
	results := callAsync(func() (bool, frontend.ExecResult) {
		res, er := call(t, c, "execute_code", sleeper(3))
		return res.IsError, er
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.WaitFor(ctx, jobStarted); err != nil {
		t.Fatal(err)
	}
	term(p)
	r := <-results
	if r.err || r.res.Stdout != "start\nend\n" {
		t.Fatalf("the call open when codexec dev was stopped: %+v", r.res)
	}
	if _, err := p.WaitFor(ctx, regexp.MustCompile(`msg="worker stopped"`)); err != nil {
		t.Fatal(err)
	}
	checkLines(t, "codexec dev", p.Out.String(), textLine)
}

// textLine is a line of slog's text handler.
var textLine = func(line string) bool { return textLineRe.MatchString(line) }

var textLineRe = regexp.MustCompile(`^time=\S+ level=(DEBUG|INFO|WARN|ERROR)\S* msg=`)

// jsonLine is a line of slog's JSON handler.
func jsonLine(line string) bool {
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		return false
	}
	_, hasTime := m["time"]
	_, hasLevel := m["level"]
	_, hasMsg := m["msg"]
	return hasTime && hasLevel && hasMsg
}

// checkLines checks that every line of out is in the format ok checks.
func checkLines(t *testing.T, who, out string, ok func(string) bool) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("%s logged %d lines", who, len(lines))
	}
	for i, line := range lines {
		if !ok(line) {
			t.Errorf("%s, line %d is not in the log format: %q", who, i+1, line)
		}
	}
}

// While Redis is down, the sessions a frontend serves keep running code in
// their environment, answered while Redis is still down (a job's claim is
// made in JetStream; worker/claim.go), and a session it never saw is
// refused with the reason. Once Redis is back after the presence records
// expired, calls run at once: no "no live worker" while the workers
// re-announce. Every line the roles logged meanwhile, go-redis's and the
// NATS client's included, is JSON (--log-format json).
func TestClusterRedisOutage(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2, "--log-format", "json")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fe, err := start(t)(e2e.Command{Name: "frontend", Path: os.Args[0], Env: cl.env,
		Args: []string{"frontend", "--http", "127.0.0.1:0", "--log-format", "json"}})
	if err != nil {
		t.Fatal(err)
	}
	url, err := fe.WaitFor(ctx, regexp.MustCompile(`"url":"(http://[^"]+/mcp)"`))
	if err != nil {
		t.Fatal(err)
	}
	c := httpClient(t, url)
	hello := map[string]any{"code": "print('hello')"}
	if res, er := call(t, c, "execute_code", hello); res.IsError || er.Stdout != "hello\n" {
		t.Fatalf("before the outage: %+v", er)
	}

	cl.redis.Stop()
	down := time.Now()
	// Redis comes back only after this call has answered (below).
	if res, er := call(t, c, "execute_code", hello); res.IsError || er.Stdout != "hello\n" {
		t.Fatalf("Redis down, a session the frontend served: %+v", er)
	}
	stranger := httpClient(t, url)
	if res, er := call(t, stranger, "execute_code", hello); !res.IsError || !strings.Contains(er.Message, "state store (Redis) is unreachable") {
		t.Fatalf("Redis down, a session the frontend never saw: %+v", er)
	}
	// Past the presence records' life (three 2 s heartbeats).
	time.Sleep(8*time.Second - time.Since(down))
	cl.redis.Restart(t)
	// Back for the frontend once its Redis client has reconnected (it
	// retries a refused dial after a pause): its readiness says when.
	base := strings.TrimSuffix(url, "/mcp")
	pollUntil(t, 30*time.Second, "the frontend ready again after Redis came back", func() bool {
		code, _ := status(t, base, "/readyz")
		return code == 200
	})
	if res, er := call(t, c, "execute_code", hello); res.IsError || er.Stdout != "hello\n" {
		t.Fatalf("Redis back: %+v", er)
	}
	if res, er := call(t, stranger, "execute_code", hello); res.IsError || er.Stdout != "hello\n" {
		t.Fatalf("Redis back, the other session: %+v", er)
	}

	term(fe)
	exits(t, fe, time.Minute)
	checkLines(t, "frontend", fe.Out.String(), jsonLine)
	for _, w := range cl.workers {
		w.Stop(stopGrace)
		checkLines(t, w.Name, w.Out.String(), jsonLine)
	}
	if !strings.Contains(fe.Out.String(), `"component":"redis"`) {
		t.Errorf("go-redis logged nothing through the frontend's logger during the outage:\n%s", fe.Out.String())
	}
}

// While Redis is down, nothing a session's jobs write is lost: its jobs go
// to the worker holding its files, which runs them on its copy (the
// newest) and saves it once Redis is back; a session whose holder dies
// meanwhile gets an error that says nothing was run, within seconds, not an
// ok from a worker that ran it on a stale copy. Until this test, the jobs
// went to the pool: each worker ran them on its own copy, and the copy
// saved first after the outage won (a fault run: two sessions' six appends
// each during a 12 s outage, every call ok, none of them kept).
func TestClusterRedisOutageKeepsFiles(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	procs := map[string]*proc{"w1": cl.workers[0], "w2": cl.workers[1]}
	appendCode := func(line string) string {
		return fmt.Sprintf("with open('log.txt', 'a') as f:\n    f.write(%q)\nprint(open('log.txt').read(), end='')", line+"\n")
	}
	type session struct {
		c      *client.Client
		want   string // what its calls that answered ok wrote
		holder string
	}
	appendOK := func(s *session, line, when string) (*mcp.CallToolResult, frontend.ExecResult) {
		t.Helper()
		res, er := call(t, s.c, "execute_code", map[string]any{"code": appendCode(line)})
		if res.IsError {
			t.Errorf("%s: %s %s %q", when, er.Status, er.Message, er.Stderr)
			return res, er
		}
		s.want += line + "\n"
		if er.Stdout != s.want {
			t.Errorf("%s, on %s: the file holds %q, want %q", when, er.WorkerID, er.Stdout, s.want)
		}
		s.holder = er.WorkerID
		return res, er
	}
	// Two sessions whose files are on different workers, so that one
	// holder can die and the other live.
	a := &session{c: httpClient(t, cl.mcpURL)}
	appendOK(a, "before", "session a, before the outage")
	var b *session
	for range 20 {
		s := &session{c: httpClient(t, cl.mcpURL)}
		if appendOK(s, "before", "session b, before the outage"); s.holder != a.holder {
			b = s
			break
		}
	}
	if b == nil {
		t.Fatalf("twenty new sessions' first jobs all ran on %s", a.holder)
	}

	cl.redis.Stop()
	down := time.Now()
	// The two sessions at once, as their clients would, each pausing
	// between its calls for its own time: a job finds both workers busy,
	// or one, or none (then the worker that asked for a job first takes
	// it, its session's holder or not).
	var wg sync.WaitGroup
	for i, s := range []*session{a, b} {
		wg.Go(func() {
			for round := 1; round <= 6; round++ {
				time.Sleep(time.Duration(100+250*i) * time.Millisecond)
				res, _ := appendOK(s, fmt.Sprintf("during %d", round), "Redis down")
				if !strings.Contains(fmt.Sprint(res.Content), "only until the store is back") {
					t.Errorf("Redis down, a call that changed the files does not say where they are: %v", res.Content)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// b's holder dies: nobody can tell from Redis, and the other worker's
	// copy is stale. The call ends soon, and says that nothing ran.
	procs[b.holder].signal(syscall.SIGKILL)
	start := time.Now()
	res, er := call(t, b.c, "execute_code", map[string]any{"code": appendCode("after the kill")})
	if !res.IsError || er.Status != "internal" || !strings.Contains(er.Message, "nothing was run") || !strings.Contains(er.Message, b.holder) {
		t.Errorf("Redis down, the holder dead: isError=%v %s %q", res.IsError, er.Status, er.Message)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Redis down, the holder dead: the call took %s", d)
	}

	// Past the presence records' life (three 2 s heartbeats).
	time.Sleep(12*time.Second - time.Since(down))
	cl.redis.Restart(t)
	base := strings.TrimSuffix(cl.mcpURL, "/mcp")
	pollUntil(t, 30*time.Second, "the frontend ready again after Redis came back", func() bool {
		code, _ := status(t, base, "/readyz")
		return code == 200
	})
	// Every append a's calls answered ok for is there.
	appendOK(a, "after", "Redis back")
	// b's holder died with the appends it had not saved (their calls said
	// so): b goes on from its last saved files, once the frontend has
	// waited for the dead holder to announce itself.
	res, er = call(t, b.c, "execute_code", map[string]any{"code": appendCode("after")})
	if res.IsError || !strings.HasPrefix(er.Stdout, "before\n") || er.WorkerID != a.holder {
		t.Errorf("Redis back, b's holder dead: isError=%v on %s %s %q %q", res.IsError, er.WorkerID, er.Status, er.Message, er.Stdout)
	}
}
