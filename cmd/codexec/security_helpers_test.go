package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/worker/sandbox"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// Helpers of the security regression suite (security_e2e_test.go): a
// deployment under test (codexec dev over HTTP, or a cluster), its MCP
// sessions, and what the host sees of the jobs (/proc, the session
// directories).

// The uids the sandbox gives to sessions: [sandboxUIDBase, +sandboxUIDCount).
const (
	sandboxUIDBase  = 2000000000
	sandboxUIDCount = 1 << 24
)

func sandboxUID(uid int) bool { return uid >= sandboxUIDBase && uid < sandboxUIDBase+sandboxUIDCount }

// securityBaseline, set by SECURITY_E2E_BASELINE=1, starts the workers
// with --sandbox off, to check that the suite catches what a worker
// without a sandbox lets through. The cases that would harm the host when
// nothing confines them (bombs, signals to every process) refuse to run.
var securityBaseline = os.Getenv("SECURITY_E2E_BASELINE") == "1"

// sandboxArgs are the flags every worker of the suite gets: a machine
// without a working bubblewrap must fail loudly, not run jobs unconfined.
func sandboxArgs() []string {
	if securityBaseline {
		return []string{"--sandbox", "off"}
	}
	return []string{"--sandbox", "require"}
}

// requireSandbox skips the test in -short mode, and when the machine lacks
// what the sandbox needs (unless CI=true: then that is a failure).
func requireSandbox(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("security e2e suite: skipped in -short mode")
	}
	var missing string
	switch {
	case securityBaseline:
		return
	case os.Geteuid() != 0:
		missing = "the sandbox gives each session a uid of its own, which needs a worker running as root"
	default:
		// The launcher the suite's codexec processes get (launcherEnv).
		if _, err := sandbox.Probe(context.Background(), sandbox.Config{Launcher: os.Getenv("CODEXEC_SANDBOX_LAUNCHER")}); err != nil {
			missing = fmt.Sprintf("no working sandbox on this machine: %v", err)
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(missing)
	}
	t.Skip(missing)
}

func randHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// secResult is a job's structured content, with the limit the job hit.
type secResult struct {
	frontend.ExecResult
	Limit string `json:"limit"`
}

// secCall calls a tool and decodes its structured content, failing the
// test if no answer comes within `within`.
func secCall(t *testing.T, c *client.Client, tool string, args map[string]any, within time.Duration) (*mcp.CallToolResult, secResult) {
	t.Helper()
	return callWithin[secResult](t, c, tool, args, within)
}

// clip shortens s for a log line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... [%d more bytes]", len(s)-n)
}

// dump is a result for a failure message: everything a reader needs to see
// what the job did.
func dump(res *mcp.CallToolResult, er secResult) string {
	isErr := res != nil && res.IsError
	txt := ""
	if res != nil {
		txt = text(res)
	}
	return fmt.Sprintf("isError=%v status=%q limit=%q exit=%d signal=%q message=%q worker=%s duration=%.0fms\n--- stdout (%d bytes, truncated=%v)\n%s\n--- stderr (%d bytes, truncated=%v)\n%s\n--- text\n%s",
		isErr, er.Status, er.Limit, er.ExitCode, er.Signal, er.Message, er.WorkerID, er.DurationMS,
		er.StdoutBytes, er.StdoutTruncated, clip(er.Stdout, 8000), er.StderrBytes, er.StderrTruncated, clip(er.Stderr, 8000), clip(txt, 2000))
}

// everything is all the text of a result, for "never appears" checks.
func everything(res *mcp.CallToolResult, er secResult) string {
	if res == nil {
		return er.Stdout + er.Stderr + er.Message
	}
	return text(res) + "\n" + er.Stdout + "\n" + er.Stderr + "\n" + er.Message
}

// lastJSON decodes the last line of stdout that is a JSON object into v.
func lastJSON(t *testing.T, res *mcp.CallToolResult, er secResult, v any) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(er.Stdout), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); strings.HasPrefix(l, "{") {
			if err := json.Unmarshal([]byte(l), v); err != nil {
				t.Fatalf("job output: %v\n%s", err, dump(res, er))
			}
			return
		}
	}
	t.Fatalf("the job printed no JSON line:\n%s", dump(res, er))
}

// pyStr quotes s as a Python string literal (JSON's escapes are Python's).
func pyStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// pyList writes ss as a Python list of strings.
func pyList(ss []string) string {
	b, _ := json.Marshal(ss)
	return string(b)
}

// ---- deployments

// secTarget is a deployment under test.
type secTarget struct {
	name string
	// dataDirs are where session directories live on the host.
	dataDirs []string
	// pids are the processes that run jobs (dev, or the cluster's worker).
	pids []int
	// logs is the first worker's log.
	logs *e2e.Buffer
	// oneSession is set when the target serves one session only (stdio).
	oneSession bool
	// newClient opens a new MCP session.
	newClient func(t *testing.T) *client.Client
	// ports are the TCP ports on the host's loopback that a job must not
	// reach: the MCP endpoint, and in a cluster NATS and Redis.
	ports map[string]int
	// canaries are strings of the workers' environment and command line
	// that no job may ever see.
	canaries []string
	// zygote is set when jobs fork from warm interpreters.
	zygote bool
	// started is when the deployment started, in clock ticks since boot
	// (the unit of /proc/PID/stat's starttime).
	started uint64
}

func (tg *secTarget) workerPIDs() []int { return tg.pids }

// cgroups reports whether the worker said that it confines jobs with
// cgroups (its "sandbox ready" line); true when it did not say.
func (tg *secTarget) cgroups() bool {
	m := regexp.MustCompile(`msg="sandbox ready".*cgroups=(true|false)`).FindStringSubmatch(tg.logs.String())
	return m == nil || m[1] == "true"
}

// needCgroups skips the test when the worker has no cgroups (then memory
// and process limits are rlimits, per process), unless CI=true.
func (tg *secTarget) needCgroups(t *testing.T, why string) {
	t.Helper()
	if tg.cgroups() {
		return
	}
	msg := "the worker has no cgroups (memory and process limits fall back to per-process rlimits): " + why
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// contAtCleanup resumes p's process group at cleanup, so that a job that
// managed to stop it does not make startProc's cleanup wait.
func contAtCleanup(t *testing.T, p *e2e.Proc) {
	t.Cleanup(func() { p.Signal(syscall.SIGCONT) })
}

// startSecDev starts `codexec dev` over HTTP with the sandbox required, a
// canary in its environment and another on its command line.
func startSecDev(t *testing.T, execMode string, extraArgs ...string) *secTarget {
	t.Helper()
	dataDir := t.TempDir()
	envCanary, secretCanary, argCanary := "canary-env-"+randHex(t, 8), "canary-secret-"+randHex(t, 8), "canaryarg"+randHex(t, 8)
	env := codexecEnv("CODEXEC_DATA_DIR="+dataDir, "CODEXEC_VENV="+venvFor(t),
		"CODEXEC_CANARY="+envCanary, "AWS_SECRET_ACCESS_KEY="+secretCanary)
	args := append([]string{"dev", "--http", "127.0.0.1:0", "--concurrency", "4", "--exec-mode", execMode,
		"--labels", "canary=" + argCanary}, sandboxArgs()...)
	args = append(args, extraArgs...)
	ticks := nowTicks(t)
	p := startProc(t, env, os.Args[0], args...)
	contAtCleanup(t, p.Proc)
	mcpURL := p.waitFor(t, urlRe, 2*time.Minute)
	u, err := url.Parse(mcpURL)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return &secTarget{
		name: "dev-" + execMode, dataDirs: []string{dataDir}, pids: []int{p.Pid()}, logs: p.Out,
		newClient: func(t *testing.T) *client.Client { return httpClient(t, mcpURL) },
		ports:     map[string]int{"mcp-http": port},
		canaries:  []string{envCanary, secretCanary, argCanary},
		zygote:    execMode == "zygote", started: ticks,
	}
}

// startSecDevStdio starts `codexec dev` on stdio, the way a desktop MCP
// client does, with the sandbox required and canaries in its environment
// and command line. It serves one session (the "local" scope).
func startSecDevStdio(t *testing.T) *secTarget {
	t.Helper()
	dataDir := t.TempDir()
	envCanary, secretCanary, argCanary := "canary-env-"+randHex(t, 8), "canary-secret-"+randHex(t, 8), "canaryarg"+randHex(t, 8)
	env := codexecEnv("CODEXEC_DATA_DIR="+dataDir, "CODEXEC_VENV="+venvFor(t),
		"CODEXEC_CANARY="+envCanary, "AWS_SECRET_ACCESS_KEY="+secretCanary)
	args := append([]string{"dev", "--labels", "canary=" + argCanary}, sandboxArgs()...)
	ticks := nowTicks(t)
	// SIGCONT first: a job that stopped the process group must not make
	// the cleanup wait.
	c, p := stdio(t, e2e.Command{Name: "codexec dev (stdio)", Path: os.Args[0], Args: args, Env: env},
		func(p *e2e.Proc) { p.Signal(syscall.SIGCONT) })
	used := false
	return &secTarget{
		name: "dev-stdio", dataDirs: []string{dataDir}, pids: []int{p.Pid()}, logs: p.Out, oneSession: true,
		newClient: func(t *testing.T) *client.Client {
			if used {
				t.Fatal("a stdio server has one session")
			}
			used = true
			return c
		},
		canaries: []string{envCanary, secretCanary, argCanary}, zygote: true, started: ticks,
	}
}

// startSecCluster starts the multi-process topology (real nats-server and
// redis-server, one frontend over HTTP, one worker running up to three jobs
// at once) with the sandbox required on the worker, canaries in the
// worker's environment and command line.
func startSecCluster(t *testing.T) *secTarget {
	t.Helper()
	natsBin := natsServerBinary(t)
	rs := redistest.Start(t)
	natsURL, natsPort := startNATS(t, natsBin)
	redisURL := rs.URL()
	ru, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	redisPort, _ := strconv.Atoi(ru.Port())

	envCanary, secretCanary, argCanary := "canary-env-"+randHex(t, 8), "canary-secret-"+randHex(t, 8), "canaryarg"+randHex(t, 8)
	common := []string{"CODEXEC_NATS_URL=" + natsURL, "CODEXEC_REDIS_URL=" + redisURL, "CODEXEC_ACK_WAIT=2s"}
	dataDir := t.TempDir()
	ticks := nowTicks(t)
	wenv := codexecEnv(append(common, "CODEXEC_DATA_DIR="+dataDir, "CODEXEC_VENV="+venvFor(t), "CODEXEC_WORKER_ID=sec1",
		"CODEXEC_CONCURRENCY=3", "CODEXEC_CANARY="+envCanary, "AWS_SECRET_ACCESS_KEY="+secretCanary)...)
	w := startWorker(t, "worker", wenv, append([]string{"--labels", "canary=" + argCanary}, sandboxArgs()...)...)
	contAtCleanup(t, w)

	mcpURL := startFrontend(t, codexecEnv(common...))
	u, err := url.Parse(mcpURL)
	if err != nil {
		t.Fatal(err)
	}
	mcpPort, _ := strconv.Atoi(u.Port())
	return &secTarget{
		name: "cluster", dataDirs: []string{dataDir}, pids: []int{w.Pid()}, logs: w.Out,
		newClient: func(t *testing.T) *client.Client { return httpClient(t, mcpURL) },
		ports:     map[string]int{"nats": natsPort, "redis": redisPort, "frontend-http": mcpPort},
		// The worker's NATS and Redis URLs are secrets of the worker too.
		canaries: []string{envCanary, secretCanary, argCanary, natsURL, redisURL},
		zygote:   true, started: ticks,
	}
}

// ---- sessions

// identity is what a job reports about itself (see identityCode).
type identity struct {
	UID      int               `json:"uid"`
	EUID     int               `json:"euid"`
	GID      int               `json:"gid"`
	Groups   []int             `json:"groups"`
	PID      int               `json:"pid"`
	Cwd      string            `json:"cwd"`
	CwdMode  int               `json:"cwd_mode"`
	CwdUID   int               `json:"cwd_uid"`
	Status   map[string]string `json:"status"`
	NS       map[string]string `json:"ns"`
	Ifaces   []string          `json:"ifaces"`
	Hostname string            `json:"hostname"`
	Marker   string            `json:"marker"`
}

// identityCode prints the job's identity as JSON, and leaves a marker file
// in the working directory so that the test finds the directory on the
// host.
const identityCode = `import json, os, socket, sys
marker = '.codexec-sec-marker-' + os.urandom(8).hex()
open(marker, 'w').close()
st = {}
for line in open('/proc/self/status'):
    k, _, v = line.partition(':')
    if k in ('Uid', 'Gid', 'Groups', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp', 'NSpid'):
        st[k] = v.strip()
ns = {}
for n in ('mnt', 'pid', 'net', 'ipc', 'uts', 'user', 'cgroup'):
    try:
        ns[n] = os.readlink('/proc/self/ns/' + n)
    except OSError as e:
        ns[n] = 'error: ' + str(e)
try:
    ifaces = [name for _, name in socket.if_nameindex()]
except OSError as e:
    ifaces = ['error: ' + str(e)]
cwd = os.getcwd()
s = os.stat(cwd)
print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
    'pid': os.getpid(), 'cwd': cwd, 'cwd_mode': s.st_mode & 0o7777, 'cwd_uid': s.st_uid, 'status': st, 'ns': ns,
    'ifaces': ifaces, 'hostname': socket.gethostname(), 'marker': marker}))
`

// secSession is one MCP session of a target.
type secSession struct {
	tg      *secTarget
	c       *client.Client
	id      identity
	hostDir string // the session's working directory on the host; "" if not found
}

// newSession opens an MCP session and learns who its jobs run as and where
// its working directory is on the host.
func (tg *secTarget) newSession(t *testing.T) *secSession {
	t.Helper()
	s := &secSession{tg: tg, c: tg.newClient(t)}
	res, er := s.run(t, identityCode, nil)
	if res.IsError {
		t.Fatalf("identity job failed:\n%s", dump(res, er))
	}
	lastJSON(t, res, er, &s.id)
	s.hostDir = tg.findHostDir(s.id.Marker)
	return s
}

// findHostDir finds the directory holding a file named marker under the
// target's data directories.
func (tg *secTarget) findHostDir(marker string) string {
	var found string
	for _, root := range tg.dataDirs {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || found != "" {
				return nil
			}
			if d.Name() == marker {
				found = filepath.Dir(path)
				return filepath.SkipAll
			}
			return nil
		})
	}
	return found
}

// jobOpts are the optional arguments of a job.
type jobOpts struct {
	timeout float64        // seconds; 0: 60
	limits  map[string]int // the call's limits parameter
	tool    string         // default execute_code
	extra   map[string]any // more arguments
}

// run runs code as a job of the session.
func (s *secSession) run(t *testing.T, code string, o *jobOpts) (*mcp.CallToolResult, secResult) {
	t.Helper()
	if o == nil {
		o = &jobOpts{}
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = 60
	}
	args := map[string]any{"code": code, "timeout_seconds": timeout}
	if o.limits != nil {
		args["limits"] = o.limits
	}
	for k, v := range o.extra {
		args[k] = v
	}
	tool := o.tool
	if tool == "" {
		tool = "execute_code"
	}
	return secCall(t, s.c, tool, args, time.Duration(timeout*float64(time.Second))+2*time.Minute)
}

// mustSucceed runs code and fails the test unless it succeeds.
func (s *secSession) mustSucceed(t *testing.T, code string) secResult {
	t.Helper()
	res, er := s.run(t, code, nil)
	if res.IsError || er.Status != "ok" {
		t.Fatalf("job failed:\n%s", dump(res, er))
	}
	return er
}

// confined fails the test, without running what follows, when the
// session's jobs do not run as a sandbox uid: `what` would harm the host if
// nothing confined it.
func (s *secSession) confined(t *testing.T, what string) {
	t.Helper()
	if !sandboxUID(s.id.UID) || s.id.EUID != s.id.UID {
		t.Fatalf("jobs of this session run as uid %d (euid %d), not a sandbox uid [%d, +2^24): not running %s on an unconfined worker",
			s.id.UID, s.id.EUID, sandboxUIDBase, what)
	}
}

// ---- the host's view of processes

type hostProc struct {
	pid, ppid int
	state     string
	comm      string
	cmdline   string // NULs replaced by spaces
	argv0     string
	uids      [4]int
	start     uint64 // clock ticks after boot
}

func (p *hostProc) String() string {
	return fmt.Sprintf("pid %d ppid %d state %s uids %v comm %q cmdline %q", p.pid, p.ppid, p.state, p.uids, p.comm, clip(p.cmdline, 300))
}

// scanProcs reads every process of the host's /proc.
func scanProcs() map[int]*hostProc {
	out := map[int]*hostProc{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p := readProc(pid); p != nil {
			out[pid] = p
		}
	}
	return out
}

func readProc(pid int) *hostProc {
	dir := "/proc/" + strconv.Itoa(pid)
	stat, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return nil
	}
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return nil
	}
	p := &hostProc{pid: pid, comm: s[open+1 : end]}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 20 {
		return nil
	}
	p.state = fields[0]
	p.ppid, _ = strconv.Atoi(fields[1])
	p.start, _ = strconv.ParseUint(fields[19], 10, 64)
	for i := range p.uids {
		p.uids[i] = -1
	}
	if status, err := os.ReadFile(dir + "/status"); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				for i, f := range strings.Fields(rest) {
					if i < 4 {
						p.uids[i], _ = strconv.Atoi(f)
					}
				}
			}
		}
	}
	if cmd, err := os.ReadFile(dir + "/cmdline"); err == nil {
		argv := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		p.argv0 = argv[0]
		p.cmdline = strings.Join(argv, " ")
	}
	return p
}

func (p *hostProc) hasUID(uid int) bool { return slices.Contains(p.uids[:], uid) }

func (p *hostProc) anySandboxUID() bool {
	for _, u := range p.uids {
		if sandboxUID(u) {
			return true
		}
	}
	return false
}

// ancestors returns p's chain of parents, nearest first.
func ancestors(procs map[int]*hostProc, p *hostProc) []*hostProc {
	var out []*hostProc
	for cur, n := p, 0; cur != nil && cur.ppid > 0 && n < 512; n++ {
		parent := procs[cur.ppid]
		if parent == nil {
			break
		}
		out = append(out, parent)
		cur = parent
	}
	return out
}

// ours reports whether p belongs to the target: it descends from one of
// its workers, or it has escaped them (its parents lead to init, not to
// another instance of this test binary) and started after the target did.
// Other tests of this package run their own codexec processes in parallel,
// whose jobs may well have the same uids.
func (tg *secTarget) ours(procs map[int]*hostProc, p *hostProc) bool {
	workers := tg.workerPIDs()
	for _, a := range ancestors(procs, p) {
		if slices.Contains(workers, a.pid) {
			return true
		}
		if a.argv0 == os.Args[0] && a.pid != os.Getpid() {
			return false // a codexec process of another test
		}
		if a.pid != os.Getpid() && strings.HasSuffix(a.argv0, ".test") {
			// Another package's test binary (go test runs packages at
			// once): its sandboxed processes use the same uid range.
			return false
		}
		if filepath.Base(a.argv0) == "codexec" {
			// A codexec server that is not the target's, on the same
			// host (a developer's own, a cluster of another run): its
			// jobs' uids come from a register of its own, and overlap.
			return false
		}
	}
	return p.start >= tg.started
}

// leftovers lists the live processes that a finished job must not have left:
// processes of the target running as uid (when it is a sandbox uid), any
// process under the target's workers running as a sandbox uid (when no job
// of the target runs), and any process whose command line contains marker.
func (tg *secTarget) leftovers(uid int, marker string, idle bool) []*hostProc {
	procs := scanProcs()
	var out []*hostProc
	for _, p := range procs {
		if strings.ContainsAny(p.state, "ZX") {
			// Dead: its parent has yet to reap it, which for an orphan
			// of the host's init can take a while.
			continue
		}
		switch {
		case marker != "" && strings.Contains(p.cmdline, marker) && p.pid != os.Getpid():
			out = append(out, p)
		case sandboxUID(uid) && p.hasUID(uid) && tg.ours(procs, p):
			out = append(out, p)
		case idle && p.anySandboxUID() && tg.ours(procs, p):
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *hostProc) int { return a.pid - b.pid })
	return out
}

// assertNoLeftovers waits up to a few seconds for the processes a job
// started to be gone (see leftovers), and fails the test with what remains.
func (s *secSession) assertNoLeftovers(t *testing.T, marker string, idle bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	var left []*hostProc
	for {
		left = s.tg.leftovers(s.id.UID, marker, idle)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	procs := scanProcs()
	var b strings.Builder
	for _, p := range left {
		fmt.Fprintf(&b, "  %s\n", p)
		for _, a := range ancestors(procs, p) {
			fmt.Fprintf(&b, "      under %s\n", a)
		}
	}
	t.Errorf("processes outlived the job (session uid %d, marker %q):\n%s", s.id.UID, marker, b.String())
}

// descendants lists the processes under pid.
func descendants(procs map[int]*hostProc, pid int) []*hostProc {
	var out []*hostProc
	for _, p := range procs {
		for _, a := range ancestors(procs, p) {
			if a.pid == pid {
				out = append(out, p)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b *hostProc) int { return a.pid - b.pid })
	return out
}

// zygotes lists the warm interpreters under pid: python processes whose
// command line names the zygote (not the launcher processes around them, nor
// the zygote's own children, which share its command line: the spare
// child forked ahead of the next job, and the jobs).
func zygotes(pid int) []*hostProc {
	procs := scanProcs()
	isZygote := func(p *hostProc) bool {
		return p != nil && strings.Contains(p.cmdline, "codexec-zygote") && !isLauncher(p)
	}
	// A zygote's parent is the worker (no sandbox) or its launcher. A
	// job's processes inherit the zygote's command line too, and while a
	// finished job's PID namespace is torn down its parent may already be
	// gone from /proc: so the parent must be seen, and be one of those two.
	isParent := func(q *hostProc) bool {
		return q != nil && (q.pid == pid || isLauncher(q))
	}
	var out []*hostProc
	for _, p := range descendants(procs, pid) {
		if isZygote(p) && isParent(procs[p.ppid]) {
			out = append(out, p)
		}
	}
	return out
}

// isLauncher reports whether p is a sandbox launcher's process outside
// the sandbox: bubblewrap, or the built-in launcher.
func isLauncher(p *hostProc) bool {
	return p.comm == "bwrap" || strings.HasSuffix(p.argv0, "bwrap") || p.comm == sandbox.LauncherName
}

// nowTicks is the time since boot in /proc/PID/stat's clock ticks (the
// start time of a process started now, give or take a tick).
func nowTicks(t *testing.T) uint64 {
	t.Helper()
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(up))
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	const clkTck = 100 // USER_HZ on every Linux architecture Go supports
	return uint64(secs*clkTck) - 1
}

// alive reports whether pid is a live, running process (not a zombie, not
// stopped).
func alive(pid int) (bool, string) {
	p := readProc(pid)
	if p == nil {
		return false, "gone"
	}
	if strings.ContainsAny(p.state, "ZXxTt") {
		return false, "state " + p.state
	}
	return true, p.state
}

// ---- the host's view of files

// fileFacts are what "unchanged" means for a host file.
type fileFacts struct {
	exists     bool
	mode       os.FileMode
	uid, gid   uint32
	size       int64
	mtime      time.Time
	ctime      syscall.Timespec
	nlink      uint64
	link       string
	hash       string // content digest of small regular files
	dirEntries []string
}

func factsOf(path string) fileFacts {
	fi, err := os.Lstat(path)
	if err != nil {
		return fileFacts{}
	}
	f := fileFacts{exists: true, mode: fi.Mode(), size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.uid, f.gid, f.ctime, f.nlink = st.Uid, st.Gid, st.Ctim, uint64(st.Nlink)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		f.link, _ = os.Readlink(path)
	case fi.IsDir():
		// A directory is its mode, owner and entries: its times and size
		// change whenever anything (other tests too) adds and removes
		// files in it.
		f.size, f.mtime, f.ctime, f.nlink = 0, time.Time{}, syscall.Timespec{}, 0
		ents, _ := os.ReadDir(path)
		for _, e := range ents {
			f.dirEntries = append(f.dirEntries, e.Name())
		}
	case fi.Mode().IsRegular() && fi.Size() < 64<<20:
		if b, err := os.ReadFile(path); err == nil {
			f.hash = sha(string(b))
		}
	}
	return f
}

func (f fileFacts) String() string {
	if !f.exists {
		return "absent"
	}
	return fmt.Sprintf("mode %v uid %d gid %d nlink %d size %d mtime %s ctime %d.%09d sha %.12s link %q entries %d",
		f.mode, f.uid, f.gid, f.nlink, f.size, f.mtime.Format(time.RFC3339Nano), f.ctime.Sec, f.ctime.Nsec, f.hash, f.link, len(f.dirEntries))
}

func (f fileFacts) equal(g fileFacts) bool {
	return f.exists == g.exists && f.mode == g.mode && f.uid == g.uid && f.gid == g.gid && f.nlink == g.nlink && f.size == g.size &&
		f.mtime.Equal(g.mtime) && f.ctime == g.ctime && f.link == g.link && f.hash == g.hash && slices.Equal(f.dirEntries, g.dirEntries)
}

// snapshot records the facts of paths, to compare after an attack.
type snapshot map[string]fileFacts

func snap(paths ...string) snapshot {
	s := snapshot{}
	for _, p := range paths {
		if p != "" {
			s[p] = factsOf(p)
		}
	}
	return s
}

// assertUnchanged fails the test for each path whose facts changed.
func (s snapshot) assertUnchanged(t *testing.T, why string) {
	t.Helper()
	paths := make([]string, 0, len(s))
	for p := range s {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		if now := factsOf(p); !now.equal(s[p]) {
			extra := ""
			if a, b := s[p].dirEntries, now.dirEntries; !slices.Equal(a, b) {
				var added []string
				for _, e := range b {
					if !slices.Contains(a, e) {
						added = append(added, e)
					}
				}
				extra = fmt.Sprintf(" (new entries: %v)", added)
			}
			t.Errorf("%s: host path %s changed:\n  before %s\n  after  %s%s", why, p, s[p], now, extra)
		}
	}
}

// diskUsage is the space the files under dir take on the host, links not
// followed.
func diskUsage(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				total += st.Blocks * 512
			}
		}
		return nil
	})
	return total
}

// duBytes is what du says dir takes on disk, in bytes: du walks by
// descriptors, so that no depth of nesting hides anything from it.
func duBytes(t *testing.T, dir string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-s", "-B1", dir).Output()
	if err != nil {
		t.Fatalf("du %s: %v", dir, err)
	}
	n, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	if err != nil {
		t.Fatalf("du %s: %q: %v", dir, out, err)
	}
	return n
}

// ---- the host's view of the network

// trap is a TCP listener on the host that no job may reach; it records
// every connection it gets.
type trap struct {
	ln   net.Listener
	mu   sync.Mutex
	hits []string
}

func newTrap(t *testing.T, addr string) *trap {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trap{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tr.mu.Lock()
			tr.hits = append(tr.hits, c.RemoteAddr().String())
			tr.mu.Unlock()
			c.Close()
		}
	}()
	return tr
}

func (tr *trap) port() int { return tr.ln.Addr().(*net.TCPAddr).Port }

func (tr *trap) connections() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.hits)
}

// hostIPv4 is a non-loopback IPv4 address of the host, or "".
func hostIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// readShadowLines returns the host's /etc/shadow lines worth looking for
// (those of some length), or nil when the file cannot be read.
func readShadowLines() []string {
	b, err := os.ReadFile("/etc/shadow")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); len(l) >= 12 {
			out = append(out, l)
		}
	}
	return out
}

// assertSameOwner fails the test for each path whose existence, type,
// permissions or owner changed (for files whose content legitimately
// changes, such as a database).
func (s snapshot) assertSameOwner(t *testing.T, why string) {
	t.Helper()
	for p, before := range s {
		now := factsOf(p)
		if now.exists != before.exists || now.mode != before.mode || now.uid != before.uid || now.gid != before.gid {
			t.Errorf("%s: owner or mode of host path %s changed:\n  before %s\n  after  %s", why, p, before, now)
		}
	}
}
