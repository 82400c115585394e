package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/cmd/codexec/internal/flagenv"
	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/internal/connlimit"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
	"github.com/mark3labs/mcp-go/server"
)

// frontendFlags are the settings of the MCP frontend, shared by dev and frontend.
type frontendFlags struct {
	http         string
	timeout      time.Duration
	maxTimeout   time.Duration
	queueWait    time.Duration
	maxCode      int64
	outputLimit  int64
	maxFile      int64
	maxFiles     int
	runHistory   int
	runKeep      time.Duration
	maxSession   int64
	allowURLReqs bool
	access       accessFlags
	fairShare    int
	quotaFlag    string
	quotaFile    string
	quotaTable   *quota.Table
	workspaceTTL time.Duration
	gcEvery      time.Duration
	// filesMirror is set by dev only: see codefiles.Config.MirrorDir.
	filesMirror string
}

func (ff *frontendFlags) register(f *flagenv.Flags, httpDefault string) {
	f.String(&ff.http, "http", "CODEXEC_HTTP_ADDR", httpDefault, "serve MCP Streamable HTTP at http://ADDR/mcp instead of stdio")
	f.Duration(&ff.timeout, "timeout", "CODEXEC_TIMEOUT", frontend.DefaultTimeout, "default wall-clock limit of a job")
	f.Duration(&ff.maxTimeout, "max-timeout", "CODEXEC_MAX_TIMEOUT", wire.DefaultMaxTimeout, "largest timeout_seconds a call may ask for")
	f.Duration(&ff.queueWait, "queue-wait", "CODEXEC_QUEUE_WAIT", frontend.DefaultQueueWait, "how long beyond its timeout a call waits for a worker")
	f.Bytes(&ff.maxCode, "max-code", "CODEXEC_MAX_CODE", frontend.DefaultMaxCodeBytes, "largest code a call may send")
	f.Bytes(&ff.outputLimit, "output-limit", "CODEXEC_OUTPUT_LIMIT", worker.DefaultOutputLimit, "cap on stdout and on stderr of a job, each")
	f.Bytes(&ff.maxFile, "max-file", "CODEXEC_MAX_FILE", codefiles.DefaultMaxFileBytes, "largest size of a code file (initialize_code_file plus appends)")
	f.Int(&ff.maxFiles, "max-files", "CODEXEC_MAX_FILES", codefiles.DefaultMaxFiles, "most code files one session may hold")
	f.Int(&ff.runHistory, "run-history", "CODEXEC_RUN_HISTORY", codefiles.DefaultRunHistory, "how many runs (the code of each job) are kept per session")
	f.Duration(&ff.runKeep, "run-retention", "CODEXEC_RUN_RETENTION", codefiles.DefaultRunRetention, "how long the code of a run is kept")
	f.Bytes(&ff.maxSession, "max-session-storage", "CODEXEC_MAX_SESSION_STORAGE", codefiles.DefaultMaxSessionBytes,
		"most one session keeps in the state store: its code files plus each distinct code of its runs (older runs are dropped to make room)")
	f.Int(&ff.fairShare, "fair-share", "CODEXEC_FAIR_SHARE", 0,
		"most jobs of one tenant (of one session, without authentication) the frontend lets into the queue at once, the rest wait their turn (0: the slots of the pool's live workers plus a quarter more, at least 2; -1: no limit)")
	f.String(&ff.quotaFlag, "quota", "CODEXEC_QUOTA", "",
		"every tenant's quotas, held across all frontends: comma-separated name=N of jobs (queued or running at once), jobs_per_minute, builds_per_hour, workspaces, code_file_bytes, working_dir_bytes, result_bytes (sizes such as 512MiB; 0 or absent: no limit)")
	f.String(&ff.quotaFile, "quota-file", "CODEXEC_QUOTA_FILE", "", "file of per-tenant quotas, lines 'TENANT name=N ...' overriding --quota, read again when it changes")
	f.Duration(&ff.workspaceTTL, "workspace-ttl", "CODEXEC_WORKSPACE_TTL", frontend.DefaultWorkspaceTTL,
		"a workspace unused for this long expires: the collector removes its code files, runs, environment choice and handle, and every worker its directories, disk image and snapshot")
	f.Duration(&ff.gcEvery, "gc-every", "CODEXEC_GC_EVERY", time.Hour, "how often the frontend collects expired workspaces (0: never; codexec admin gc collects on demand)")
	f.Bool(&ff.allowURLReqs, "allow-url-requirements", "CODEXEC_ALLOW_URL_REQUIREMENTS", false, "accept 'name @ https://...' packages (set it on frontends and workers alike)")
	ff.access.register(f)
}

func (ff *frontendFlags) config(pool string, access auth.Policy, log *slog.Logger) frontend.Config {
	return frontend.Config{
		Access: access,
		Pool:   pool, DefaultTimeout: ff.timeout, MaxTimeout: ff.maxTimeout, QueueWait: ff.queueWait,
		MaxCodeBytes: int(ff.maxCode), OutputLimit: ff.outputLimit, Version: Version(), Logger: log,
		CodeFiles: codefiles.Config{
			MaxFileBytes: ff.maxFile, MaxFiles: ff.maxFiles, RunHistory: ff.runHistory, RunRetention: ff.runKeep,
			MaxSessionBytes: ff.maxSession, MirrorDir: ff.filesMirror,
		},
		AllowURLRequirements: ff.allowURLReqs, FairShare: ff.fairShare, Quotas: ff.quotaTable, WorkspaceTTL: ff.workspaceTTL,
	}
}

// quotas reads --quota and --quota-file; nil when neither is set.
func (ff *frontendFlags) quotas(log *slog.Logger) (*quota.Table, error) {
	if ff.quotaFlag == "" && ff.quotaFile == "" {
		return nil, nil
	}
	l, err := quota.ParseLimits(ff.quotaFlag)
	if err != nil {
		return nil, flagenv.UsageError{Err: fmt.Errorf("--quota: %w", err)}
	}
	return quota.NewTable(l, ff.quotaFile, log)
}

// warnUnboundedTenants says, at start, which storage quotas are without a
// limit on a frontend whose callers authenticate (tenants that share it):
// each session's code files are bounded, but not how many sessions a
// tenant makes, so one tenant could fill the state store (Redis, which
// holds every tenant's code files) and slow or fail every other's calls.
func warnUnboundedTenants(access auth.Policy, t *quota.Table, log *slog.Logger) {
	if access.Authenticator == nil {
		return
	}
	var open []string
	for _, name := range []string{quota.CodeFileBytes, quota.Workspaces, quota.WorkingDirBytes, quota.ResultBytes} {
		if t.For("", name) <= 0 {
			open = append(open, name)
		}
	}
	if len(open) > 0 {
		log.Warn("callers authenticate, but these quotas have no default limit: one tenant may fill the state store "+
			"or the workers' disks for all; set them with --quota (see docs/operations.md, Tenants)", "quotas", open)
	}
}

// workerFlags are the settings of a worker, shared by dev and worker.
type workerFlags struct {
	id          string
	python      string
	venv        string
	scriptsDir  string
	concurrency int
	batchSlots  int
	envPass     string
	execMode    string
	preload     string
	maxZygotes  int
	zygoteIdle  time.Duration
	// contexts
	maxContexts   int
	contextIdle   time.Duration
	contextMemory int64
	// environments
	envBudget    int64
	cacheBudget  int64
	managers     string
	pythons      string
	indexURL     string
	extraIndex   string
	findLinks    string
	noIndex      bool
	sourceBuilds bool
	fetchUV      bool
	labels       string
	existingEnvs string
	// isolation
	limits     limits.Set
	maxLimits  limits.Set
	sandbox    string
	bwrap      string
	launcher   string
	jobNetwork string
	sandboxRO  string
	sandboxDev string
	gpus       string
	gpuRoot    string
	nvidiaSMI  string
	seccompOK  string
	uidDir     string
	// disk limit
	sessionFS        string
	sessionFSSize    int64
	sessionFSMounted int
	sessionFSIdle    time.Duration
}

func (wf *workerFlags) register(f *flagenv.Flags) {
	f.String(&wf.id, "id", "CODEXEC_WORKER_ID", "", "worker id (default: hostname plus a random suffix)")
	f.String(&wf.python, "python", "CODEXEC_PYTHON", "python3", "interpreter the default venv is built from: a path, a name on PATH, or a version such as 3.12")
	f.String(&wf.venv, "venv", "CODEXEC_VENV", "", "use this existing venv as the default environment instead of building one")
	f.String(&wf.scriptsDir, "scripts-dir", "CODEXEC_SCRIPTS_DIR", "", "where each job's script is kept while it runs (default DATA_DIR/scripts)")
	f.Int(&wf.concurrency, "concurrency", "CODEXEC_CONCURRENCY", 0, "jobs run at once (default: 4 per CPU, no more than the host's memory holds at the default memory limit, never fewer than the CPUs)")
	f.Int(&wf.batchSlots, "batch-concurrency", "CODEXEC_BATCH_CONCURRENCY", 0, "batch jobs (codexec batch) run at once, only while fewer jobs than --concurrency run (default: a quarter of --concurrency, at least 1)")
	f.String(&wf.envPass, "env-pass", "CODEXEC_ENV_PASSTHROUGH", "", "comma-separated names of the worker's environment variables that jobs may see")
	f.String(&wf.execMode, "exec-mode", "CODEXEC_EXEC_MODE", worker.ExecZygote, "zygote: fork each job from a warm interpreter that has done its imports; spawn: a fresh interpreter per job")
	f.String(&wf.preload, "preload", "CODEXEC_PRELOAD", strings.Join(runner.DefaultPreload, ","), "comma-separated modules a warm interpreter imports before forking jobs (none: nothing)")
	f.Int(&wf.maxZygotes, "max-zygotes", "CODEXEC_MAX_ZYGOTES", runner.DefaultMaxZygotes, "most warm interpreters alive at once (the least recently used idle one makes room)")
	f.Duration(&wf.zygoteIdle, "zygote-idle", "CODEXEC_ZYGOTE_IDLE", runner.DefaultZygoteIdle, "stop a warm interpreter that ran no job for this long")
	f.Int(&wf.maxContexts, "max-contexts", "CODEXEC_MAX_CONTEXTS", worker.DefaultMaxContexts, "most contexts (live interpreters of sessions) a worker holds; the least recently used idle one makes room, and its next call is told")
	f.Bytes(&wf.contextMemory, "context-memory", "CODEXEC_CONTEXT_MEMORY", 0, "most memory the contexts a worker holds may have as their memory limits together (one without a limit counts as all of it); past it the least recently used idle ones make room, and a context that cannot fit is refused (0: half the host's memory)")
	f.Duration(&wf.contextIdle, "context-idle", "CODEXEC_CONTEXT_IDLE", worker.DefaultContextIdle, "end a context that ran nothing for this long (its next call is told)")
	f.Bytes(&wf.envBudget, "env-budget", "CODEXEC_ENV_BUDGET", envcache.DefaultBudgetBytes, "disk the cache of built environments may use (least recently used evicted past it)")
	f.Bytes(&wf.cacheBudget, "installer-cache-budget", "CODEXEC_INSTALLER_CACHE_BUDGET", envcache.DefaultInstallerCacheBytes, "disk pip's and uv's caches may hold beyond what the environments share with them (emptied after a build past it)")
	f.String(&wf.managers, "managers", "CODEXEC_MANAGERS", "venv,uv,conda", "comma-separated environment managers offered (those missing on the machine are left out)")
	f.String(&wf.pythons, "pythons", "CODEXEC_PYTHONS", "", "comma-separated Python versions offered for environments, e.g. 3.11,3.12 (default: those found among 3.8 to 3.14)")
	f.String(&wf.indexURL, "index-url", "CODEXEC_INDEX_URL", "", "package index pip and uv install from (default PyPI)")
	f.String(&wf.extraIndex, "extra-index-url", "CODEXEC_EXTRA_INDEX_URL", "", "comma-separated extra package indexes")
	f.String(&wf.findLinks, "find-links", "CODEXEC_FIND_LINKS", "", "comma-separated directories or pages of wheels and archives to install from")
	f.Bool(&wf.fetchUV, "fetch-uv", "CODEXEC_FETCH_UV", true, "when uv is offered (--managers) but not installed, fetch it from the package index into DATA_DIR/tools/uv at start (once; pip is used when that fails)")
	f.Bool(&wf.sourceBuilds, "source-builds", "CODEXEC_SOURCE_BUILDS", false, "let installs build packages from source distributions (runs the package's build code at install time; by default wheels only)")
	f.Bool(&wf.noIndex, "no-index", "CODEXEC_NO_INDEX", false, "use no package index, only --find-links (air-gapped clusters)")
	f.String(&wf.labels, "labels", "CODEXEC_LABELS", "", "comma-separated KEY=VALUE labels advertised for placement, e.g. gpu=1")
	f.String(&wf.existingEnvs, "existing-envs", "CODEXEC_EXISTING_ENVS", "", "comma-separated environments that exist on this worker (venv paths, conda names) that sessions may select")
	limitSet(f, &wf.limits, "limits", "CODEXEC_LIMITS", limits.Default,
		"limits of every job that asks for nothing else, as KEY=VALUE,... over the default (keys memory, cpu, procs, fsize, disk, nofile; KEY=none: no such limit; none: no limits)")
	limitSet(f, &wf.maxLimits, "max-limits", "CODEXEC_MAX_LIMITS", limits.DefaultMax,
		"most a call's limits parameter may ask for, in the form of --limits (KEY=none: no maximum)")
	f.Choice(&wf.sandbox, "sandbox", "CODEXEC_SANDBOX", worker.SandboxAuto, []string{worker.SandboxAuto, worker.SandboxRequire, worker.SandboxOff},
		"auto and require: a sandbox around every job, and refuse to start where it cannot work; off: jobs run unconfined, as the worker's own user")
	f.String(&wf.bwrap, "bwrap", "CODEXEC_BWRAP", "bwrap", "the bubblewrap binary of --sandbox-launcher bwrap: a path, or a name on PATH")
	f.Choice(&wf.launcher, "sandbox-launcher", "CODEXEC_SANDBOX_LAUNCHER", sandbox.LauncherAuto, []string{sandbox.LauncherAuto, sandbox.LauncherBuiltin, sandbox.LauncherBwrap},
		"what builds the sandboxes: builtin, codexec itself (nothing to install); bwrap, bubblewrap (see --bwrap); auto: builtin, or bwrap where only bwrap works")
	f.Choice(&wf.jobNetwork, "job-network", "CODEXEC_JOB_NETWORK", worker.NetworkNone, []string{worker.NetworkNone, worker.NetworkAllow},
		"none: jobs get a private loopback only; allow: jobs share the worker's network (install jobs always get network)")
	f.String(&wf.sandboxRO, "sandbox-ro", "CODEXEC_SANDBOX_RO", "", "comma-separated host paths bound read-only into every sandbox, e.g. a shared data set")
	f.String(&wf.sandboxDev, "sandbox-dev", "CODEXEC_SANDBOX_DEV", "", "comma-separated device nodes bound into every sandbox, e.g. /dev/nvidia0")
	f.String(&wf.gpus, "gpus", "CODEXEC_GPUS", "all", "NVIDIA GPUs offered to jobs that ask for GPUs, one job per device: all (those found at start-up), none, or comma-separated indices and UUIDs, e.g. 0,2 (see docs/gpu.md)")
	f.String(&wf.gpuRoot, "gpu-root", "CODEXEC_GPU_ROOT", "/", "directory under which GPUs are looked for (dev/nvidia*, proc/driver/nvidia): / on a real machine, a fake tree in tests")
	f.String(&wf.nvidiaSMI, "nvidia-smi", "CODEXEC_NVIDIA_SMI", "nvidia-smi", "nvidia-smi asked for GPU models, memory, MIG instances and jobs' peak GPU memory: a path, a name on PATH, or none")
	f.String(&wf.seccompOK, "seccomp-allow", "CODEXEC_SECCOMP_ALLOW", "", "comma-separated system calls that the sandboxed jobs' seccomp filter refuses and jobs may make after all, e.g. ptrace (see docs/security.md)")
	f.Choice(&wf.sessionFS, "session-fs", "CODEXEC_SESSION_FS", worker.SessionFSAuto, []string{worker.SessionFSAuto, worker.SessionFSOff},
		"auto: each session's directory is a file system of its own whose size the kernel holds to the disk limit, where the worker can make them (root, loop devices, mkfs.ext4; otherwise it warns and measures); off: the directory is measured every 100 ms")
	f.Bytes(&wf.sessionFSSize, "session-fs-size", "CODEXEC_SESSION_FS_SIZE", 0, "size of each session's file system, a sparse image (default: the largest disk limit in --max-limits, plus a sixteenth and 256 MiB; 64 GiB without one)")
	f.Int(&wf.sessionFSMounted, "session-fs-mounted", "CODEXEC_SESSION_FS_MOUNTED", worker.DefaultSessionFSMounted, "most sessions' file systems mounted at once, each on a loop device (the least recently used idle one makes room)")
	f.Duration(&wf.sessionFSIdle, "session-fs-idle", "CODEXEC_SESSION_FS_IDLE", worker.DefaultSessionFSIdle, "unmount a session's file system that ran no job for this long")
	f.String(&wf.uidDir, "uid-dir", "CODEXEC_UID_DIR", sandbox.DefaultUIDDir, "where the workers of this host (run as root, sandboxed) record the uids given to sessions, so that no two sessions on the host share one; one directory for every worker of the host")
}

// check refuses settings that parse but do not fit together, naming the
// flags, before anything starts.
func (wf *workerFlags) check() error {
	if err := wf.limits.Check(wf.maxLimits); err != nil {
		return flagenv.UsageError{Err: fmt.Errorf("--limits is not within --max-limits: %w", err)}
	}
	return nil
}

// commaList splits a comma-separated flag value, dropping empty items.
func commaList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// parseLabels reads KEY=VALUE,...; a malformed item is kept with an empty
// value, which worker.Config's validation refuses with its name.
func parseLabels(s string) map[string]string {
	items := commaList(s)
	if len(items) == 0 {
		return nil
	}
	out := make(map[string]string, len(items))
	for _, item := range items {
		k, v, _ := strings.Cut(item, "=")
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out
}

func (wf *workerFlags) config(dataDir, pool string, ff *frontendFlags, log *slog.Logger) worker.Config {
	var pass []string
	for _, n := range strings.Split(wf.envPass, ",") {
		if n = strings.TrimSpace(n); n != "" {
			pass = append(pass, n)
		}
	}
	preload := []string{}
	if p := strings.TrimSpace(wf.preload); p != "none" {
		for _, m := range strings.Split(p, ",") {
			if m = strings.TrimSpace(m); m != "" {
				preload = append(preload, m)
			}
		}
	}
	return worker.Config{
		ID: wf.id, Pool: pool, DataDir: dataDir, ScriptsDir: wf.scriptsDir, Python: wf.python, VenvPath: wf.venv,
		Concurrency: wf.concurrency, BatchConcurrency: wf.batchSlots, MaxTimeout: ff.maxTimeout, OutputLimit: ff.outputLimit,
		EnvPassthrough: pass, Logger: log,
		ExecMode: wf.execMode, Preload: preload, MaxZygotes: wf.maxZygotes, ZygoteIdle: wf.zygoteIdle,
		MaxContexts: wf.maxContexts, ContextIdle: wf.contextIdle, ContextMemory: wf.contextMemory,
		EnvBudget: wf.envBudget, InstallerCacheBudget: wf.cacheBudget, Managers: commaList(wf.managers), Pythons: commaList(wf.pythons),
		Index: envcache.IndexConfig{
			IndexURL: strings.TrimSpace(wf.indexURL), ExtraIndexURLs: commaList(wf.extraIndex),
			FindLinks: commaList(wf.findLinks), NoIndex: wf.noIndex, SourceBuilds: wf.sourceBuilds,
		},
		FetchUV: wf.fetchUV, AllowURLRequirements: ff.allowURLReqs, Labels: parseLabels(wf.labels), ExistingEnvs: commaList(wf.existingEnvs),
		Limits: wf.limits, MaxLimits: wf.maxLimits, ExplicitLimits: true,
		Sandbox: wf.sandbox, Bwrap: wf.bwrap, SandboxLauncher: wf.launcher, JobNetwork: wf.jobNetwork,
		SandboxReadOnly: commaList(wf.sandboxRO), SandboxDevices: commaList(wf.sandboxDev), UIDDir: wf.uidDir,
		SeccompAllow: commaList(wf.seccompOK),
		SessionFS:    wf.sessionFS, SessionFSSize: wf.sessionFSSize, SessionFSMounted: wf.sessionFSMounted, SessionFSIdle: wf.sessionFSIdle,
		GPUs: wf.gpus, GPURoot: wf.gpuRoot, NvidiaSMI: wf.nvidiaSMI,
	}
}

// The bounds of the HTTP server's connections (see serveFrontend).
const (
	maxHTTPConns = 4096
	idleHTTPConn = 2 * time.Minute
	// maxHTTPHeader bounds a request's line and headers: a bearer token
	// or a JWT and a few short headers are all an MCP request carries.
	// net/http's default, 1 MiB, let each of maxHTTPConns connections hold
	// about 1.15 MiB of headers while its body did not come, credentials or
	// not: 200 such connections took 230 MiB of a frontend with --auth
	// tokens, all 4096 would take about 4.7 GiB.
	maxHTTPHeader = 64 << 10
)

// newHTTPServer is the HTTP server of the frontend's and the metrics'
// listeners: headers must come within 10 s and hold at most maxHTTPHeader
// bytes (a larger request is answered 431 unread), and an idle keep-alive
// connection is closed after idleHTTPConn.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleHTTPConn,
		MaxHeaderBytes: maxHTTPHeader, ErrorLog: stdLogger(log)}
}

// serveFrontend serves MCP on stdio or HTTP until ctx ends (or stdin
// closes). When ctx ends (a signal), the calls still open get grace to
// finish and answer (frontend.Drain); past it they are cancelled.
func serveFrontend(ctx context.Context, fe *frontend.Frontend, httpAddr string, stdin io.Reader, stdout io.Writer, log *slog.Logger, grace time.Duration) error {
	if httpAddr == "" {
		return serveStdio(ctx, fe, stdin, stdout, log, grace)
	}
	handler, mcpHTTP := fe.HTTPHandler()
	ln, err := net.Listen("tcp", httpAddr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", httpAddr, err)
	}
	// At most maxHTTPConns connections at once, so that many idle or slow
	// ones cannot take every descriptor of the process (the bodies are
	// bounded by the frontend); when all are taken, a new one takes the
	// place of the oldest that waits for headers, is idle, or waits for its
	// body (connlimit), so slow clients cannot keep others out. An idle
	// keep-alive connection is closed after idleHTTPConn.
	conns := connlimit.New(ln, maxHTTPConns)
	ln = conns
	srv := newHTTPServer(handler, log)
	conns.Hook(srv)
	// The first line on stderr names the address, so scripts and tests can
	// find a random port (--http 127.0.0.1:0).
	log.Info("serving MCP over HTTP", "url", "http://"+ln.Addr().String()+"/mcp")
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("stopping: finishing open calls", "grace", grace)
	fe.Drain()
	shutCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := shutdownHTTP(shutCtx, srv, mcpHTTP); err != nil {
		log.Warn("grace period over: cancelling the calls still open", "err", err)
		fe.Abort()
		_ = srv.Close()
	}
	log.Info("frontend stopped")
	return nil
}

// shutdownHTTP stops taking connections and waits, until ctx ends, for
// the requests being served to finish: the tool calls answer, while the
// sessions' listening streams (long-lived GET requests that would hold the
// shutdown until its end) are closed, again as new ones come.
func shutdownHTTP(ctx context.Context, srv *http.Server, mcpHTTP *server.StreamableHTTPServer) error {
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		mcpHTTP.CloseSessions(ctx)
		select {
		case err := <-done:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return err
		case <-t.C:
		}
	}
}

// serveStdio serves MCP on stdin and stdout. When ctx ends, it stops
// reading requests and waits, up to grace, for the calls being served to
// write their answers.
func serveStdio(ctx context.Context, fe *frontend.Frontend, stdin io.Reader, stdout io.Writer, log *slog.Logger, grace time.Duration) error {
	log.Info("serving MCP on stdio")
	serveCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	abort := time.AfterFunc(math.MaxInt64, func() {
		log.Warn("grace period over: cancelling the calls still open")
		fe.Abort()
	})
	defer abort.Stop()
	stop := context.AfterFunc(ctx, func() {
		log.Info("stopping: finishing open calls", "grace", grace)
		fe.Drain()
		abort.Reset(grace)
		cancel()
	})
	defer stop()
	return fe.ServeStdio(serveCtx, stdin, stdout)
}

// startWorker starts w. A signal during the start interrupts it; once
// started, the worker stops only through stopWorker, which lets its
// running jobs finish (a context bound to the signal would cancel them at
// once: see broker.Consume).
func startWorker(ctx context.Context, w *worker.Worker) error {
	startCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	err := w.Start(startCtx)
	stop()
	if err != nil {
		cancel() // nothing started is bound to it
	}
	return err
}

// stopWorker drains w: running jobs get grace to finish, then are cancelled
// and handed back to the queue.
func stopWorker(w *worker.Worker, grace time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		log.Warn("worker stop", "err", err)
	}
	log.Info("worker stopped")
}

// openRedis connects to Redis, retrying for a while so that a cluster's
// processes may start in any order.
func openRedis(ctx context.Context, opts statestore.RedisOptions) (statestore.Store, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		st, err := statestore.NewRedis(ctx, opts)
		if err == nil {
			return st, nil
		}
		select {
		case <-ctx.Done():
			if len(opts.SentinelAddrs) > 0 {
				return nil, fmt.Errorf("redis through sentinels %s: %w", strings.Join(opts.SentinelAddrs, ","), err)
			}
			return nil, fmt.Errorf("redis at %s: %w", redactURL(opts.URL), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// openBroker connects to NATS and defines the stream and buckets, retrying
// for a while as long as JetStream is still forming (a cluster electing its
// leaders, or not knowing all its nodes yet), so that a cluster's processes
// may start in any order.
func openBroker(ctx context.Context, cfg broker.Config) (*broker.Broker, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		// A request made before a cluster has elected its leader gets no
		// answer at all: each attempt has a deadline of its own.
		actx, acancel := context.WithTimeout(ctx, openAttemptTimeout)
		b, err := broker.Open(actx, cfg)
		acancel()
		if err == nil {
			return b, nil
		}
		if !jetStreamForming(err) && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
			return nil, fmt.Errorf("nats at %s: %w", redactURL(cfg.URL), err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("nats at %s: %w", redactURL(cfg.URL), err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// jetStreamForming says whether err is one JetStream gives while a cluster
// forms: nobody answers yet, the system is "temporarily unavailable" (503),
// or no node can take a replica yet ("no suitable peers", 10005). JetStream
// not enabled at all is a 503 too, and final.
func jetStreamForming(err error) bool {
	if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled ||
		apiErr.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount {
		return false
	}
	return apiErr.Code == 503 || apiErr.ErrorCode == jsErrCodeNoSuitablePeers
}

// openAttemptTimeout bounds one attempt of openBroker.
const openAttemptTimeout = 5 * time.Second

// jsErrCodeNoSuitablePeers is JetStream's "no suitable peers for placement".
const jsErrCodeNoSuitablePeers jetstream.ErrorCode = 10005

// redactURL hides a password in a URL, or in each of a comma-separated
// list of URLs, before it is logged.
func redactURL(u string) string {
	if strings.Contains(u, ",") {
		parts := strings.Split(u, ",")
		for i, p := range parts {
			parts[i] = redactURL(p)
		}
		return strings.Join(parts, ",")
	}
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			return u[:i+3] + "***@" + rest[at+1:]
		}
	}
	return u
}

func mkdirPrivate(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return abs, nil
}
