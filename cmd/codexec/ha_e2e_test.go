package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// Highly available deployments, one server killed with SIGKILL under load:
// a three-node NATS cluster with everything replicated three times, and
// Redis with two replicas and three sentinels. codexec is given the whole
// cluster (every NATS URL; the sentinels) and must follow the failover by
// itself. Each test counts the calls that were answered ok, answered with
// a clear error, or lost (no answer, or an answer without the job's output),
// and the jobs that ran twice; nothing may be lost or run twice.

// haCallWithin bounds one call of the load. A call still unanswered after
// it counts as lost.
const haCallWithin = 40 * time.Second

// haLoad counts the outcomes of calls made while a server is killed.
type haLoad struct {
	mu                            sync.Mutex
	submitted, ok, clearErr, lost int
	errs                          map[string]int // clear errors and losses, by kind
	killedAt                      time.Time
	okAfter                       int           // ok answers to calls sent after the kill
	recovered                     time.Duration // kill to the first of those
	jobIDs                        []string
}

func newHALoad() *haLoad { return &haLoad{errs: map[string]int{}} }

// begin counts a call and says whether it is sent after the kill.
func (l *haLoad) begin() (afterKill bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.submitted++
	return !l.killedAt.IsZero()
}

// record counts a call's outcome: kind is "" for ok, else a short
// description of the error, lost tells a loss from a clear error.
func (l *haLoad) record(afterKill bool, kind string, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case kind == "":
		l.ok++
		if afterKill {
			if l.okAfter++; l.okAfter == 1 {
				l.recovered = time.Since(l.killedAt)
			}
		}
	case lost:
		l.lost++
		l.errs["lost: "+kind]++
	default:
		l.clearErr++
		l.errs[kind]++
	}
}

// killWhen calls kill once, when the load has had `before` ok answers.
func (l *haLoad) killWhen(before int, kill func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.killedAt.IsZero() && l.ok >= before {
		l.killedAt = time.Now()
		kill()
	}
}

// done says whether `after` calls sent after the kill have been answered ok.
func (l *haLoad) done(after int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.okAfter >= after
}

func (l *haLoad) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	kinds := make([]string, 0, len(l.errs))
	for k, n := range l.errs {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(kinds)
	return fmt.Sprintf("%d calls submitted, %d ok, %d clear errors, %d lost [%s]; first ok %s after the kill",
		l.submitted, l.ok, l.clearErr, l.lost, strings.Join(kinds, "; "), l.recovered.Round(10*time.Millisecond))
}

// execute runs `print(n)` through execute_code and records the outcome.
func (l *haLoad) execute(ctx context.Context, c *client.Client, n int) {
	after := l.begin()
	res, err := e2e.Call(ctx, c, "execute_code", map[string]any{"code": fmt.Sprintf("print(%d)", n)}, haCallWithin)
	if err != nil {
		l.record(after, "no answer: "+firstLine(err.Error()), true)
		return
	}
	var er frontend.ExecResult
	if err := e2e.Decode(res, &er); err != nil {
		l.record(after, "undecodable answer", true)
		return
	}
	l.mu.Lock()
	if er.JobID != "" {
		l.jobIDs = append(l.jobIDs, er.JobID)
	}
	l.mu.Unlock()
	switch {
	case !res.IsError && er.Stdout == fmt.Sprintf("%d\n", n):
		l.record(after, "", false)
	case res.IsError && er.Status != string(wire.StatusOK) && er.Status != string(wire.StatusError) && er.Message != "":
		l.record(after, "execute_code "+er.Status+": "+shortMessage(er.Message), false)
	default:
		l.record(after, fmt.Sprintf("execute_code answered %s with stdout %q", er.Status, er.Stdout), true)
	}
}

// runLoad runs load from workers goroutines until, after the kill (done
// when `before` calls were ok), `after` calls sent after it were ok, or ctx
// ends. load(ctx, g, i) makes call i of goroutine g.
func (l *haLoad) run(ctx context.Context, workers, before, after int, kill func(), load func(ctx context.Context, g, i int)) {
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil && !l.done(after); i++ {
				load(ctx, g, i)
				l.killWhen(before, kill)
			}
		}()
	}
	wg.Wait()
}

// jobStartRe matches a worker's log line for a job run, with the job's id.
var jobStartRe = regexp.MustCompile(`msg="job started".* job=(\S+)`)

// runTwice counts the jobs of ids that the workers started more than once.
func runTwice(ids []string, workers ...*e2e.Proc) int {
	starts := map[string]int{}
	for _, w := range workers {
		for _, m := range jobStartRe.FindAllStringSubmatch(w.Out.String(), -1) {
			starts[m[1]]++
		}
	}
	twice := 0
	for _, id := range ids {
		if starts[id] > 1 {
			twice++
		}
	}
	return twice
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// ulidRe matches a job id in an error message.
var ulidRe = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)

// shortMessage keeps the kind of an error message, not its ids.
func shortMessage(s string) string {
	s = ulidRe.ReplaceAllString(firstLine(s), "<id>")
	if len(s) > 140 {
		s = s[:140]
	}
	return s
}

// startHAWorkers starts n workers with env and returns them.
func startHAWorkers(t *testing.T, n int, common []string) []*e2e.Proc {
	t.Helper()
	var ws []*e2e.Proc
	for i := range n {
		env := codexecEnv(append(slices.Clone(common), "CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
			fmt.Sprintf("CODEXEC_WORKER_ID=w%d", i+1), "CODEXEC_CONCURRENCY=2")...)
		ws = append(ws, startWorker(t, fmt.Sprintf("worker w%d", i+1), env))
	}
	return ws
}

// checkReplicated fails t unless every stream of the account (the jobs
// stream, the key-value buckets and object stores are all streams) has
// `replicas` replicas, and the three codexec creates at start are there.
func checkReplicated(ctx context.Context, t *testing.T, js jetstream.JetStream, replicas int) {
	t.Helper()
	want := map[string]bool{wire.JobsStream: false, "KV_" + wire.ResultsBucket: false, "OBJ_" + wire.BlobsBucket: false}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		if r := s.CachedInfo().Config.Replicas; r != replicas {
			t.Errorf("stream %s has %d replicas, want %d", name, r, replicas)
		}
		want[name] = true
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("no stream %s", name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// The stream's leader of a three-node NATS cluster is killed with SIGKILL
// while calls run: the calls go on through the other two nodes, nothing
// is lost and no job runs twice.
func TestHANATSNodeKilled(t *testing.T) {
	t.Parallel()
	bin := natsServerBinary(t)
	rs := redistest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	nodes, err := e2e.NATSNodes(3)
	if err != nil {
		t.Fatal(err)
	}
	procs := make(map[string]*e2e.Proc, len(nodes))
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		p, err := e2e.StartNATSNode(ctx, start(t), bin, os.Environ(), t.TempDir(), nodes, i)
		if err != nil {
			t.Fatal(err)
		}
		procs[n.Name], urls[i] = p, n.URL()
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// codexec starts while the cluster forms (it elects its leaders, learns
	// its nodes), and must wait for it by itself.
	common := []string{"CODEXEC_NATS_URL=" + strings.Join(urls, ","), "CODEXEC_REPLICAS=3", "CODEXEC_REDIS_URL=" + rs.URL(),
		"CODEXEC_ACK_WAIT=2s", "CODEXEC_QUEUE_WAIT=20s"}
	workers := startHAWorkers(t, 2, common)
	mcpURL := startFrontend(t, codexecEnv(common...))
	checkReplicated(ctx, t, js, 3)

	c := httpClient(t, mcpURL)
	var killed string
	kill := func() {
		info, err := js.Stream(ctx, wire.JobsStream)
		if err != nil || info.CachedInfo().Cluster == nil || procs[info.CachedInfo().Cluster.Leader] == nil {
			t.Errorf("no leader of the jobs stream: %v", err)
			killed = nodes[0].Name
		} else {
			killed = info.CachedInfo().Cluster.Leader
		}
		procs[killed].Signal(syscall.SIGKILL)
	}
	l := newHALoad()
	var seq sync.Mutex
	next := 0
	l.run(ctx, 4, 8, 16, kill, func(ctx context.Context, _, _ int) {
		seq.Lock()
		next++
		n := next
		seq.Unlock()
		l.execute(ctx, c, n)
	})
	twice := runTwice(l.jobIDs, workers...)
	t.Logf("NATS node %s (the jobs stream's leader) of 3 killed: %s; %d run twice", killed, l, twice)
	if l.lost != 0 || twice != 0 || !l.done(16) {
		t.Errorf("lost %d calls, %d jobs ran twice, %d ok after the kill", l.lost, twice, l.okAfter)
	}
}

// The Redis primary is killed with SIGKILL while code files grow and code
// runs: Sentinel promotes a replica, codexec follows it, and every append
// that was acknowledged is in the file once (codexec waits for a replica
// on each write, --redis-wait 1).
func TestHARedisPrimaryKilled(t *testing.T) {
	t.Parallel()
	natsURL, _ := startNATS(t, natsServerBinary(t))
	primary := redistest.Start(t)
	redistest.StartReplica(t, primary)
	redistest.StartReplica(t, primary)
	sentinels := redistest.StartSentinels(t, primary, "codexec", 3, 2)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	common := []string{"CODEXEC_NATS_URL=" + natsURL, "CODEXEC_REDIS_URL=redis://unused:1/0",
		"CODEXEC_REDIS_SENTINEL=" + strings.Join(redistest.SentinelAddrs(sentinels), ","),
		"CODEXEC_REDIS_MASTER=codexec", "CODEXEC_REDIS_WAIT=1", "CODEXEC_ACK_WAIT=2s", "CODEXEC_QUEUE_WAIT=20s"}
	workers := startHAWorkers(t, 1, common)
	mcpURL := startFrontend(t, codexecEnv(common...))

	// One session and one code file per goroutine; each call appends a
	// line, every fourth also runs code.
	const goroutines = 3
	clients := make([]*client.Client, goroutines)
	paths := make([]string, goroutines)
	acked := make([][]string, goroutines)
	failed := make([][]string, goroutines)
	for g := range clients {
		clients[g] = httpClient(t, mcpURL)
		res, fr := callAs[frontend.FileResult](t, clients[g], "initialize_code_file",
			map[string]any{"content": "", "filename": fmt.Sprintf("g%d.py", g)})
		if res.IsError {
			t.Fatalf("initialize_code_file: %+v", fr)
		}
		paths[g] = fr.FilePath
	}
	l := newHALoad()
	var mu sync.Mutex
	l.run(ctx, goroutines, 20, 20, func() { primary.Kill() }, func(ctx context.Context, g, i int) {
		line := fmt.Sprintf("print('g%d-%d')\n", g, i)
		after := l.begin()
		res, err := e2e.Call(ctx, clients[g], "append_to_code_file", map[string]any{"file_path": paths[g], "content": line}, haCallWithin)
		var fr frontend.FileResult
		if err == nil {
			err = e2e.Decode(res, &fr)
		}
		mu.Lock()
		switch {
		case err != nil:
			failed[g] = append(failed[g], line)
			l.record(after, "append: no answer: "+firstLine(err.Error()), true)
		case !res.IsError && fr.Status == "ok":
			acked[g] = append(acked[g], line)
			l.record(after, "", false)
		case res.IsError:
			failed[g] = append(failed[g], line)
			l.record(after, "append "+fr.Status+": "+shortMessage(text(res)), false)
		default:
			failed[g] = append(failed[g], line)
			l.record(after, "append answered "+fr.Status, true)
		}
		mu.Unlock()
		if i%4 == 3 {
			l.execute(ctx, clients[g], i)
		}
	})

	lostLines, dupLines := 0, 0
	for g := range clients {
		res, err := e2e.Call(ctx, clients[g], "read_code_file", map[string]any{"file_path": paths[g]}, haCallWithin)
		if err != nil || res.IsError {
			t.Fatalf("read_code_file after the failover: %v %s", err, text(res))
		}
		count := map[string]int{}
		for _, line := range strings.SplitAfter(text(res), "\n") {
			count[line]++
		}
		for _, line := range acked[g] {
			if count[line] == 0 {
				lostLines++
			}
		}
		for line, n := range count {
			if n > 1 && line != "" {
				dupLines++
			}
		}
	}
	twice := runTwice(l.jobIDs, workers...)
	t.Logf("Redis primary killed, Sentinel failover: %s; %d acknowledged appends missing from the files, %d lines there twice, %d jobs run twice",
		l, lostLines, dupLines, twice)
	if l.lost != 0 || lostLines != 0 || dupLines != 0 || twice != 0 || !l.done(20) {
		t.Errorf("lost %d calls and %d acknowledged appends, %d lines twice, %d jobs ran twice, %d ok after the kill",
			l.lost, lostLines, dupLines, twice, l.okAfter)
	}
}
