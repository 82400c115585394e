package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// BenchmarkFaults runs a fresh cluster per fault on the loopback (NATS with
// a file store, Redis with appendonly, one frontend on HTTP, two where the
// fault is a frontend's death, two workers), drives a steady load of
// execute_code calls through mcp-go's Streamable HTTP client, injects the
// fault once the load runs, restores it, and classifies every call after
// the load ends:
//
//   - ok: the call's own output came back, from the call or from
//     get_job_result after recovery (a call that failed with its job id is
//     counted by what became of the job);
//   - clear error: an error that names its cause, for a job that did not
//     complete (the run-count oracle below says so);
//   - lost: no answer, an answer that is neither, a job id whose result
//     never came, or a failure without a job id for a job that ran;
//   - misreported: an error for a job that ran to its end;
//   - run twice: the oracle saw two runs of one call.
//
// The run-count oracle: the workers run with --sandbox off and every job
// appends "<token> start <time> <cwd>" to a file outside any workspace
// before it sleeps, and "<token> end <time> <cwd>" after, in one write each
// (O_APPEND). A
// run that starts leaves a line whatever happens to it after, so no run is
// missed; the cwd, a session directory under one worker's data directory,
// says which worker ran it. A call runs twice when its token has two end
// lines, or two start lines of which one is not an attempt cut short by the
// fault (a start without an end on the worker that was killed: that
// attempt is counted as restarted, not as run twice).
//
// The benchmark fails when a call is lost, misreported or run twice. It
// also checks that a session's working directory is found by 20 of 20
// calls with two and three workers, and after the worker holding it dies.
//
//	go test -run '^$' -bench Faults -benchtime 1x ./cmd/codexec
func BenchmarkFaults(b *testing.B) {
	var rows []faultRow
	for _, f := range faults() {
		b.Run(f.name, func(b *testing.B) {
			for range b.N {
				r := runFault(b, f)
				r.report(b)
				rows = append(rows, r)
			}
		})
	}
	var wd []workdirRow
	for _, workers := range []int{2, 3} {
		b.Run(fmt.Sprintf("workdir/%d workers", workers), func(b *testing.B) {
			for range b.N {
				wd = append(wd, runWorkdir(b, workers))
			}
		})
	}
	fmt.Print(faultTable(rows, wd))
}

const (
	// faultCallers is how many callers drive the load at once.
	faultCallers = 4
	// faultWarmOK is how many calls are answered ok before the fault.
	faultWarmOK = 8
	// faultAfter is how long the load goes on after the fault is restored.
	faultAfter = 10 * time.Second
	// faultCallWithin bounds a call; one unanswered after it counts by its
	// job id, or as lost without one.
	faultCallWithin = 40 * time.Second
	// faultFetchWithin bounds the wait for the jobs of failed calls after
	// the load.
	faultFetchWithin = 30 * time.Second
	// faultPause is how long a caller waits after a call that failed.
	faultPause = 500 * time.Millisecond
	// faultJobSleep is how long each job runs between its two oracle lines.
	faultJobSleep = "0.3"
)

// faultSpec is one fault: the cluster it needs and how it is injected.
type faultSpec struct {
	name      string
	natsNodes int  // 1, or 3 for a cluster with --replicas 3
	sentinel  bool // Redis with two replicas and three sentinels
	frontends int
	// sessionless callers have no Mcp-Session-Id: their jobs belong to the
	// principal of their Authorization header, on any frontend.
	sessionless bool
	// inject injects the fault and restores it; it returns when the fault
	// is restored, with the time recovery is measured from.
	inject func(b *testing.B, fc *faultCluster) (from time.Time, what string)
}

func faults() []faultSpec {
	return []faultSpec{
		{name: "worker kill -9", natsNodes: 1, frontends: 1, inject: killBusyWorker},
		{name: "frontend kill -9", natsNodes: 1, frontends: 2, sessionless: true, inject: killBusyFrontend},
		{name: "frontend kill -9 (sessions)", natsNodes: 1, frontends: 2, inject: killBusyFrontend},
		{name: "NATS kill -9 for 5s", natsNodes: 1, frontends: 1, inject: killNATSFor(5 * time.Second)},
		{name: "NATS kill -9 for 25s", natsNodes: 1, frontends: 1, inject: killNATSFor(25 * time.Second)},
		{name: "Redis kill -9 for 3s", natsNodes: 1, frontends: 1, inject: killRedisFor(3 * time.Second)},
		{name: "Redis kill -9 for 20s", natsNodes: 1, frontends: 1, inject: killRedisFor(20 * time.Second)},
		{name: "NATS node of 3 kill -9", natsNodes: 3, frontends: 1, inject: killNATSLeader},
		{name: "Redis failover", natsNodes: 1, sentinel: true, frontends: 1, inject: killRedisPrimary},
	}
}

// faultCluster is the cluster of one fault run.
type faultCluster struct {
	natsBin    string
	natsProcs  []*e2e.Proc
	natsNodes  []e2e.NATSNode // a cluster's nodes; one node's port otherwise
	natsStores []string
	js         jetstream.JetStream // for the stream leader of a cluster
	redis      *redistest.Server
	frontends  []*e2e.Proc
	urls       []string
	workers    []*e2e.Proc
	dataDirs   map[string]string // worker name by data directory
	oracle     string            // the file every job appends its lines to
	load       *faultLoad
	killed     string // the worker killed by the fault, if one was
}

func startFaultCluster(b *testing.B, f faultSpec) *faultCluster {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := &faultCluster{natsBin: natsServerBinary(b), dataDirs: map[string]string{},
		oracle: filepath.Join(b.TempDir(), "runs.log")}
	nodes, err := e2e.NATSNodes(f.natsNodes)
	if err != nil {
		b.Fatal(err)
	}
	fc.natsNodes = nodes
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		store := b.TempDir()
		var p *e2e.Proc
		if len(nodes) == 1 {
			p, err = e2e.StartNATSAt(ctx, start(b), fc.natsBin, os.Environ(), store, n.Port)
		} else {
			p, err = e2e.StartNATSNode(ctx, start(b), fc.natsBin, os.Environ(), store, nodes, i)
		}
		if err != nil {
			b.Fatal(err)
		}
		fc.natsProcs, fc.natsStores, urls[i] = append(fc.natsProcs, p), append(fc.natsStores, store), n.URL()
	}
	common := []string{"CODEXEC_NATS_URL=" + strings.Join(urls, ","), "CODEXEC_SANDBOX=off"}
	if len(nodes) > 1 {
		common = append(common, "CODEXEC_REPLICAS=3")
		nc, err := nats.Connect(strings.Join(urls, ","), nats.MaxReconnects(-1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		if fc.js, err = jetstream.New(nc); err != nil {
			b.Fatal(err)
		}
	}
	fc.redis = redistest.Start(b)
	if f.sentinel {
		redistest.StartReplica(b, fc.redis)
		redistest.StartReplica(b, fc.redis)
		sentinels := redistest.StartSentinels(b, fc.redis, "codexec", 3, 2)
		common = append(common, "CODEXEC_REDIS_URL=redis://unused:1/0",
			"CODEXEC_REDIS_SENTINEL="+strings.Join(redistest.SentinelAddrs(sentinels), ","),
			"CODEXEC_REDIS_MASTER=codexec", "CODEXEC_REDIS_WAIT=1")
	} else {
		common = append(common, "CODEXEC_REDIS_URL="+fc.redis.URL())
	}
	for i := range 2 {
		name, dir := fmt.Sprintf("w%d", i+1), b.TempDir()
		env := codexecEnv(append(slices.Clone(common), "CODEXEC_DATA_DIR="+dir, "CODEXEC_VENV="+venvFor(b),
			"CODEXEC_WORKER_ID="+name)...)
		fc.workers = append(fc.workers, startWorker(b, "worker "+name, env))
		fc.dataDirs[dir] = name
	}
	for range f.frontends {
		p, url, err := e2e.StartFrontend(ctx, start(b), os.Args[0], codexecEnv(common...))
		if err != nil {
			b.Fatal(err)
		}
		fc.frontends, fc.urls = append(fc.frontends, p), append(fc.urls, url)
	}
	return fc
}

// runFault runs fault f once on a fresh cluster and classifies its calls.
func runFault(b *testing.B, f faultSpec) faultRow {
	b.Helper()
	b.StopTimer()
	fc := startFaultCluster(b, f)
	l := &faultLoad{fc: fc, sessionless: f.sessionless, okCh: make(chan struct{}, 1024),
		jobIDs: map[string]string{}, inFlight: map[string]string{}}
	fc.load = l
	b.StartTimer()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for g := range faultCallers {
		wg.Add(1)
		go func() { defer wg.Done(); l.caller(ctx, g) }()
	}
	l.waitOK(b, faultWarmOK, 2*time.Minute)
	from, what := f.inject(b, fc)
	time.Sleep(faultAfter)
	l.stop()
	wg.Wait()
	l.fetchPending(faultFetchWithin)
	l.closeClients()
	b.StopTimer()

	r := l.classify(b, f.name, what, from)
	if r.lost+r.misreported+r.twice > 0 {
		// The processes' output follows, from the cleanup of each.
		b.Errorf("%s: %d lost, %d misreported, %d run twice:\n%s", f.name, r.lost, r.misreported, r.twice, strings.Join(r.bad, "\n"))
	}
	return r
}

// faultLoad is the load of one fault run: each caller makes one call after
// another, each call with a token of its own.
type faultLoad struct {
	fc          *faultCluster
	sessionless bool
	okCh        chan struct{}
	// sessionIDs is each session caller's Mcp-Session-Id, kept when it
	// connects again: a client behind a load balancer keeps its session
	// when the frontend that served it dies, and the session id is valid
	// on every frontend.
	sessionIDs sync.Map // caller → string

	mu       sync.Mutex
	stopped  bool
	calls    []*faultCall
	clients  []*client.Client
	jobIDs   map[string]string // by token, from the first progress notification
	inFlight map[string]string // the frontend's URL by token, while the call waits
}

// faultCall is one execute_code call and what became of it.
type faultCall struct {
	token         string
	caller        int
	c             *client.Client // the client it was made through
	started, done time.Time
	jobID         string // from the first progress notification or the answer
	err           error  // no answer
	res           *mcp.CallToolResult
	er            frontend.ExecResult
	fetched       bool // er is get_job_result's answer, after the load
}

func (l *faultLoad) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

func (l *faultLoad) isStopped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopped
}

// waitOK waits until n calls were answered ok.
func (l *faultLoad) waitOK(b *testing.B, n int, within time.Duration) {
	b.Helper()
	deadline := time.After(within)
	for range n {
		select {
		case <-l.okCh:
		case <-deadline:
			b.Fatalf("fewer than %d calls ok within %s before the fault", n, within)
		}
	}
}

// connect connects caller g to frontend i (of those there are).
func (l *faultLoad) connect(ctx context.Context, g, i int) (*client.Client, error) {
	url := l.fc.urls[i%len(l.fc.urls)]
	version, opts := mcp.LATEST_LEGACY_PROTOCOL_VERSION, []transport.StreamableHTTPCOption(nil)
	if l.sessionless {
		version = mcp.LATEST_PROTOCOL_VERSION
		opts = append(opts, transport.WithHTTPHeaders(map[string]string{"Authorization": fmt.Sprintf("Bearer faults-caller-%d", g)}))
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var c *client.Client
	var err error
	if id, ok := l.sessionIDs.Load(g); ok && !l.sessionless {
		c, err = e2e.ResumeHTTP(cctx, url, id.(string), opts...)
	} else {
		c, err = e2e.ConnectHTTP(cctx, url, version, clientInfo, opts...)
	}
	if err != nil {
		return nil, err
	}
	if !l.sessionless {
		if t, ok := c.GetTransport().(*transport.StreamableHTTP); ok && t.GetSessionId() != "" {
			l.sessionIDs.LoadOrStore(g, t.GetSessionId())
		}
	}
	l.mu.Lock()
	l.clients = append(l.clients, c)
	l.mu.Unlock()
	return c, nil
}

// caller makes calls until the load stops. After an error of the
// transport it connects again, to the next frontend.
func (l *faultLoad) caller(ctx context.Context, g int) {
	for fe, i := g, 0; !l.isStopped(); fe++ {
		c, err := l.connect(ctx, g, fe)
		if err != nil {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		c.OnNotification(l.notified)
		i = l.callOn(ctx, g, i, c, l.fc.urls[fe%len(l.fc.urls)])
	}
}

// notified notes the job id that a call's first progress notification
// names ("job <id> submitted; ..."), by the call's progress token.
func (l *faultLoad) notified(n mcp.JSONRPCNotification) {
	msg, _ := n.Params.AdditionalFields["message"].(string)
	rest, ok := strings.CutPrefix(msg, "job ")
	if n.Method != "notifications/progress" || !ok {
		return
	}
	id, _, _ := strings.Cut(rest, " ")
	l.mu.Lock()
	l.jobIDs[fmt.Sprint(n.Params.AdditionalFields["progressToken"])] = id
	l.mu.Unlock()
}

// callOn makes calls i, i+1, ... on c, a client of the frontend at url,
// until the load stops or the transport fails, and returns the next i.
func (l *faultLoad) callOn(ctx context.Context, g, i int, c *client.Client, url string) int {
	for ; !l.isStopped(); i++ {
		fc := &faultCall{token: fmt.Sprintf("tok-%d-%d", g, i), caller: g, c: c, started: time.Now()}
		req := mcp.CallToolRequest{}
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": faultCode(l.fc.oracle, fc.token)}
		req.Params.Meta = &mcp.Meta{ProgressToken: fc.token}
		l.mu.Lock()
		l.inFlight[fc.token] = url
		l.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, faultCallWithin)
		res, err := c.CallTool(cctx, req)
		cancel()
		fc.done, fc.res, fc.err = time.Now(), res, err
		if err == nil {
			if derr := e2e.Decode(res, &fc.er); derr != nil {
				fc.err = derr
			}
		}
		l.mu.Lock()
		delete(l.inFlight, fc.token)
		fc.jobID = l.jobIDs[fc.token]
		if fc.er.JobID != "" {
			fc.jobID = fc.er.JobID
		}
		l.calls = append(l.calls, fc)
		l.mu.Unlock()
		if fc.ok() {
			select {
			case l.okCh <- struct{}{}:
			default:
			}
		} else {
			time.Sleep(faultPause) // as a client would before its next call
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return i + 1 // the transport failed: connect again
		}
	}
	return i
}

// faultCode is the code of the call with token: it leaves its start and
// end lines in the oracle's file, and prints the token.
func faultCode(oracle, token string) string {
	return fmt.Sprintf(`import os, time
def mark(phase):
    with open(%q, 'a') as f:
        f.write('%%s %%s %%.6f %%s\n' %% (%q, phase, time.time(), os.getcwd()))
mark('start')
time.sleep(%s)
mark('end')
print(%q)
`, oracle, token, faultJobSleep, token)
}

// ok says whether the call's own output came back.
func (c *faultCall) ok() bool {
	return c.err == nil && c.res != nil && !c.res.IsError && c.er.Status == string(wire.StatusOK) && c.er.Stdout == c.token+"\n"
}

// pending says whether the call did not end ok and has a job id to ask
// get_job_result about.
func (c *faultCall) pending() bool { return !c.ok() && c.jobID != "" }

// fetchPending asks get_job_result about every pending call, again while
// it answers running, until within has passed. A sessionless caller asks
// through its newest client (any frontend), a caller with a session
// through the client of the call (its session), or its newest one when
// that session's frontend is gone.
func (l *faultLoad) fetchPending(within time.Duration) {
	deadline := time.Now().Add(within)
	l.mu.Lock()
	calls := slices.Clone(l.calls)
	l.mu.Unlock()
	newest := map[int]*client.Client{}
	for _, c := range calls {
		newest[c.caller] = c.c
	}
	for {
		waiting := 0
		for _, c := range calls {
			if !c.pending() || (c.fetched && c.er.Status != "running") {
				continue
			}
			via := c.c
			if l.sessionless {
				via = newest[c.caller]
			}
			res, err := e2e.Call(context.Background(), via, "get_job_result", map[string]any{"job_id": c.jobID}, 10*time.Second)
			if err != nil && via != newest[c.caller] {
				// The session's frontend is gone: ask in the caller's new session.
				res, err = e2e.Call(context.Background(), newest[c.caller], "get_job_result", map[string]any{"job_id": c.jobID}, 10*time.Second)
			}
			var er frontend.ExecResult
			if err == nil {
				err = e2e.Decode(res, &er)
			}
			if err != nil {
				c.fetched, c.er = true, frontend.ExecResult{Status: "running", Message: "get_job_result: " + firstLine(err.Error())}
				waiting++
				continue
			}
			c.fetched, c.res, c.er, c.err = true, res, er, nil
			if er.Status == "running" {
				waiting++
			}
		}
		if waiting == 0 || time.Now().After(deadline) {
			return
		}
		time.Sleep(time.Second)
	}
}

func (l *faultLoad) closeClients() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.clients {
		_ = c.Close()
	}
}

// faultRuns is what the oracle saw of one token.
type faultRuns struct {
	starts, ends map[string]int       // by worker
	startedAt    map[string]time.Time // the last start, by worker
}

func (r faultRuns) total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// readOracle reads the oracle's file: the runs of each token.
func (fc *faultCluster) readOracle(b *testing.B) map[string]faultRuns {
	b.Helper()
	data, err := os.ReadFile(fc.oracle)
	if err != nil && !os.IsNotExist(err) {
		b.Fatal(err)
	}
	runs := map[string]faultRuns{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, " ", 4)
		if len(f) != 4 {
			continue
		}
		secs, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			b.Fatalf("oracle line %q: %v", line, err)
		}
		r, ok := runs[f[0]]
		if !ok {
			r = faultRuns{starts: map[string]int{}, ends: map[string]int{}, startedAt: map[string]time.Time{}}
			runs[f[0]] = r
		}
		w := "?"
		for dir, name := range fc.dataDirs {
			if strings.HasPrefix(f[3], dir+"/") {
				w = name
			}
		}
		if f[1] == "start" {
			r.starts[w]++
			r.startedAt[w] = time.UnixMicro(int64(secs * 1e6))
		} else {
			r.ends[w]++
		}
	}
	return runs
}

// faultRow is one fault's figures.
type faultRow struct {
	name, what                                 string
	submitted, ok, clearErr, lost, misreported int
	twice, restarted, fetchedOK                int
	restartedIn                                time.Duration // from the kill to the start of the last job restarted
	recover                                    time.Duration // -1: no ok call after the fault
	errKinds                                   map[string]int
	bad                                        []string
}

// classify counts the calls of the load by their fate.
func (l *faultLoad) classify(b *testing.B, name, what string, from time.Time) faultRow {
	b.Helper()
	runs := l.fc.readOracle(b)
	r := faultRow{name: name, what: what, recover: -1, errKinds: map[string]int{}}
	for _, c := range l.calls {
		r.submitted++
		ran := runs[c.token]
		starts, ends := ran.total(ran.starts), ran.total(ran.ends)
		cut := 0 // attempts cut short by the fault
		if l.fc.killed != "" && ran.starts[l.fc.killed] > ran.ends[l.fc.killed] {
			cut = ran.starts[l.fc.killed] - ran.ends[l.fc.killed]
		}
		if ends > 1 || starts-cut > 1 {
			r.twice++
			r.bad = append(r.bad, fmt.Sprintf("run twice: %s starts %v ends %v", c.ident(from), ran.starts, ran.ends))
		} else if cut > 0 && starts > cut {
			r.restarted++
			for w, at := range ran.startedAt {
				if w != l.fc.killed {
					r.restartedIn = max(r.restartedIn, at.Sub(from))
				}
			}
		}
		switch kind, fate := c.fate(ends > 0, starts > 0); fate {
		case "ok":
			r.ok++
			if c.fetched {
				r.fetchedOK++
			}
			if !c.started.Before(from) && (r.recover < 0 || c.done.Sub(from) < r.recover) {
				r.recover = c.done.Sub(from)
			}
		case "clear":
			r.clearErr++
			r.errKinds[kind]++
		case "misreported":
			r.misreported++
			r.bad = append(r.bad, fmt.Sprintf("misreported: %s: %s; oracle starts %v ends %v", c.ident(from), kind, ran.starts, ran.ends))
		default:
			r.lost++
			r.bad = append(r.bad, fmt.Sprintf("lost: %s: %s; oracle starts %v ends %v", c.ident(from), kind, ran.starts, ran.ends))
		}
	}
	return r
}

// ident names the call in a report: its token, its job id and when it
// started and ended, in seconds from the fault's reference time.
func (c *faultCall) ident(from time.Time) string {
	id := "no job id"
	if c.jobID != "" {
		id = "job " + c.jobID
	}
	return fmt.Sprintf("%s (%s, sent at %+.1f s, answered at %+.1f s)", c.token, id, c.started.Sub(from).Seconds(), c.done.Sub(from).Seconds())
}

// fate is what became of the call, given whether its code ran to its end
// or started at all: ok, clear, misreported or lost, with a short kind.
func (c *faultCall) fate(ended, started bool) (kind, fate string) {
	switch {
	case c.ok():
		if !ended {
			return "ok without a run", "misreported"
		}
		return "", "ok"
	case c.err != nil && c.jobID == "":
		if errors.Is(c.err, context.DeadlineExceeded) {
			return "no answer within " + faultCallWithin.String(), "lost"
		}
		if started {
			return "transport error for a job that ran: " + firstLine(c.err.Error()), "lost"
		}
		return "transport: " + shortMessage(c.err.Error()), "clear"
	case c.err != nil:
		return "no answer and no result for its job id: " + firstLine(c.err.Error()), "lost"
	case c.er.Status == "running":
		return "still running after the load: " + shortMessage(c.er.Message), "lost"
	case c.res.IsError && c.er.Status != string(wire.StatusOK) && c.er.Status != string(wire.StatusError) && c.er.Message != "":
		kind = c.er.Status + ": " + shortMessage(c.er.Message)
		if c.fetched && c.er.Status == string(wire.StatusRejected) && started {
			return "its job ran, get_job_result answers " + kind, "lost"
		}
		if ended {
			return kind, "misreported"
		}
		return kind, "clear"
	default:
		return fmt.Sprintf("answered %s (isError %v) with stdout %q: %s", c.er.Status, c.res.IsError, c.er.Stdout, shortMessage(c.er.Message)), "lost"
	}
}

func (r faultRow) report(b *testing.B) {
	b.ReportMetric(float64(r.submitted), "calls")
	b.ReportMetric(float64(r.ok), "ok")
	b.ReportMetric(float64(r.clearErr), "clear_errors")
	b.ReportMetric(float64(r.lost), "lost")
	b.ReportMetric(float64(r.misreported), "misreported")
	b.ReportMetric(float64(r.twice), "run_twice")
	b.ReportMetric(r.recover.Seconds(), "recover_s")
	if r.restarted > 0 {
		b.ReportMetric(r.restartedIn.Seconds(), "restarted_after_s")
	}
	kinds := make([]string, 0, len(r.errKinds))
	for k, n := range r.errKinds {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(kinds)
	b.Logf("%s (%s): %d calls, %d ok (%d of them through get_job_result), %d clear errors [%s], %d lost, %d misreported, %d run twice, %s; first ok %s after",
		r.name, r.what, r.submitted, r.ok, r.fetchedOK, r.clearErr, strings.Join(kinds, "; "), r.lost, r.misreported, r.twice, r.restartedText(), fmtRecover(r.recover))
}

// restartedText says how many jobs were restarted after their worker was
// killed, and when the last of them was answered.
func (r faultRow) restartedText() string {
	if r.restarted == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (started again %.1f s after the kill)", r.restarted, r.restartedIn.Seconds())
}

func fmtRecover(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

// The faults.

// killBusyWorker kills with SIGKILL a worker that is in the middle of a
// job (the oracle has its start line and no end line).
func killBusyWorker(b *testing.B, fc *faultCluster) (time.Time, string) {
	victim := 0
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if i := fc.busyWorker(b); i >= 0 {
			victim = i
			break
		}
	}
	fc.killed = fmt.Sprintf("w%d", victim+1)
	fc.workers[victim].Kill()
	return time.Now(), "worker " + fc.killed + " killed mid-job, not restarted"
}

// busyWorker is the index of a worker with a job between its two lines, or -1.
func (fc *faultCluster) busyWorker(b *testing.B) int {
	for _, r := range fc.readOracle(b) {
		for w, n := range r.starts {
			if n > r.ends[w] {
				var i int
				if _, err := fmt.Sscanf(w, "w%d", &i); err == nil {
					return i - 1
				}
			}
		}
	}
	return -1
}

// killBusyFrontend kills with SIGKILL the first frontend while one of its
// calls has its job id and no answer yet.
func killBusyFrontend(b *testing.B, fc *faultCluster) (time.Time, string) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if fc.load.inFlightOn(fc.urls[0], true) {
			break
		}
	}
	for !fc.load.inFlightOn(fc.urls[0], false) {
		time.Sleep(10 * time.Millisecond)
	}
	fc.frontends[0].Kill()
	how := "with an Mcp-Session-Id each, kept on frontend 2 (as behind a load balancer)"
	if fc.load.sessionless {
		how = "sessionless, one principal each: the same scope on frontend 2"
	}
	return time.Now(), "frontend 1 of 2 killed mid-call, not restarted; its callers go on through frontend 2, " + how
}

// inFlightOn says whether a call through the frontend at url waits for
// its answer, having its job id from a progress notification if notified.
func (l *faultLoad) inFlightOn(url string, notified bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for tok, u := range l.inFlight {
		if u == url && (!notified || l.jobIDs[tok] != "") {
			return true
		}
	}
	return false
}

// killNATSFor kills the NATS server with SIGKILL and starts it again on its
// port and store after d.
func killNATSFor(d time.Duration) func(*testing.B, *faultCluster) (time.Time, string) {
	return func(b *testing.B, fc *faultCluster) (time.Time, string) {
		fc.natsProcs[0].Kill()
		<-fc.natsProcs[0].Exited()
		time.Sleep(d)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p, err := e2e.StartNATSAt(ctx, start(b), fc.natsBin, os.Environ(), fc.natsStores[0], fc.natsNodes[0].Port)
		if err != nil {
			b.Fatal(err)
		}
		fc.natsProcs[0] = p
		return time.Now(), fmt.Sprintf("NATS down %s, restarted on its store", d)
	}
}

// killRedisFor kills Redis with SIGKILL and starts it again on its data
// (appendonly) after d.
func killRedisFor(d time.Duration) func(*testing.B, *faultCluster) (time.Time, string) {
	return func(b *testing.B, fc *faultCluster) (time.Time, string) {
		addr := fc.redis.Addr
		fc.redis.Kill()
		time.Sleep(d)
		fc.redis.Restart(b)
		if fc.redis.Addr != addr {
			b.Fatalf("Redis came back on %s, not %s", fc.redis.Addr, addr)
		}
		return time.Now(), fmt.Sprintf("Redis down %s, restarted on its appendonly file", d)
	}
}

// killNATSLeader kills the jobs stream's leader of the three NATS nodes
// and starts it again on its store 5s later.
func killNATSLeader(b *testing.B, fc *faultCluster) (time.Time, string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	victim := 0
	if s, err := fc.js.Stream(ctx, wire.JobsStream); err == nil && s.CachedInfo().Cluster != nil {
		for i, n := range fc.natsNodes {
			if n.Name == s.CachedInfo().Cluster.Leader {
				victim = i
			}
		}
	}
	fc.natsProcs[victim].Kill()
	<-fc.natsProcs[victim].Exited()
	from := time.Now()
	time.Sleep(5 * time.Second)
	p, err := e2e.StartNATSNode(ctx, start(b), fc.natsBin, os.Environ(), fc.natsStores[victim], fc.natsNodes, victim)
	if err != nil {
		b.Fatal(err)
	}
	fc.natsProcs[victim] = p
	return from, fmt.Sprintf("node %s (the jobs stream's leader) down 5 s; recovery from the kill", fc.natsNodes[victim].Name)
}

// killRedisPrimary kills the Redis primary; Sentinel promotes a replica.
func killRedisPrimary(b *testing.B, fc *faultCluster) (time.Time, string) {
	fc.redis.Kill()
	return time.Now(), "primary killed, not restarted; Sentinel promotes a replica; recovery from the kill"
}

// The working directory check.

type workdirRow struct {
	workers                  int
	found, foundAfter, moved int
	holder                   string
}

// runWorkdir writes a file in a session's working directory, reads it in
// 20 calls, kills the worker that holds it and reads it in 20 more.
func runWorkdir(b *testing.B, workers int) workdirRow {
	b.Helper()
	b.StopTimer()
	cl := startCluster(b, workers)
	c := httpClient(b, cl.mcpURL)
	b.StartTimer()
	r := workdirRow{workers: workers}
	res, er := call(b, c, "execute_code", map[string]any{"code": "open('note.txt', 'w').write('kept')"})
	if res.IsError {
		b.Fatalf("write: %+v", er)
	}
	r.holder = er.WorkerID
	r.found, _ = readNoteN(b, c, 20, r.holder)
	var idx int
	if _, err := fmt.Sscanf(r.holder, "w%d", &idx); err != nil || idx < 1 || idx > workers {
		b.Fatalf("the write ran on %q", r.holder)
	}
	cl.workers[idx-1].Kill()
	r.foundAfter, r.moved = readNoteN(b, c, 20, r.holder)
	b.ReportMetric(float64(r.found), "found_of_20")
	b.ReportMetric(float64(r.foundAfter), "found_after_kill_of_20")
	b.Logf("%d workers: %d of 20 reads found the file; after %s was killed, %d of 20 (%d ran elsewhere)", workers, r.found, r.holder, r.foundAfter, r.moved)
	if r.found != 20 || r.foundAfter != 20 || r.moved != 20 {
		b.Errorf("%d workers: %d of 20 reads found the file, %d of 20 after its holder %s died (%d ran elsewhere)", workers, r.found, r.foundAfter, r.holder, r.moved)
	}
	return r
}

// readNoteN reads note.txt in n calls and returns how many found it and
// how many ran on a worker other than not.
func readNoteN(b *testing.B, c *client.Client, n int, not string) (found, elsewhere int) {
	for i := 0; i < n; i++ {
		res, er := call(b, c, "execute_code", map[string]any{
			"code": "import os\nprint(open('note.txt').read() if os.path.exists('note.txt') else 'MISSING')"})
		if res.IsError {
			b.Errorf("read %d: %+v", i, er)
			continue
		}
		if er.WorkerID != not {
			elsewhere++
		}
		if strings.TrimSpace(er.Stdout) == "kept" {
			found++
		}
	}
	return found, elsewhere
}

// faultTable is the figures as a Markdown table.
func faultTable(rows []faultRow, wd []workdirRow) string {
	var s strings.Builder
	s.WriteString("\n| fault | calls | ok (of them via get_job_result) | clear errors | lost | misreported | run twice | restarted after a worker kill | first ok after |\n")
	s.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&s, "| %s | %d | %d (%d) | %d | %d | %d | %d | %s | %s |\n", r.name, r.submitted, r.ok, r.fetchedOK,
			r.clearErr, r.lost, r.misreported, r.twice, r.restartedText(), fmtRecover(r.recover))
	}
	for _, r := range rows {
		if len(r.errKinds) > 0 || len(r.bad) > 0 {
			fmt.Fprintf(&s, "\n%s (%s):\n", r.name, r.what)
			for k, n := range r.errKinds {
				fmt.Fprintf(&s, "  clear: %d× %s\n", n, k)
			}
			for _, l := range r.bad {
				fmt.Fprintf(&s, "  %s\n", l)
			}
		}
	}
	if len(wd) > 0 {
		s.WriteString("\n| workers | reads that found the file | after its holder's kill -9 |\n|---|---|---|\n")
		for _, r := range wd {
			fmt.Fprintf(&s, "| %d | %d of 20 | %d of 20 |\n", r.workers, r.found, r.foundAfter)
		}
	}
	return s.String()
}
