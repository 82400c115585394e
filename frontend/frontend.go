package frontend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/codefiles"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/internal/telemetry"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// Config configures a Frontend. WithDefaults fills unset fields.
type Config struct {
	// Pool is the worker pool jobs are sent to. Default "default".
	Pool string
	// DefaultTimeout is a job's wall-clock limit when the call names none. Default 60s.
	DefaultTimeout time.Duration
	// MaxTimeout is the largest timeout_seconds a call may ask for. Default
	// wire.DefaultMaxTimeout (10m), as the workers'.
	MaxTimeout time.Duration
	// MaxCodeBytes is the largest code a call may send. Default 16 MiB.
	MaxCodeBytes int
	// QueueWait is how long, beyond its own timeout, a call waits for its
	// result: time in the queue, and a redelivery if a worker dies mid-job.
	// Default 2m.
	QueueWait time.Duration
	// OutputLimit caps stdout and stderr, each, in bytes. 0: the worker's default.
	OutputLimit int64
	// MaxRequestBytes is the largest body of an HTTP request: a larger one
	// is refused with 413 before it is read. Default: the largest legal
	// request, six times the larger of MaxCodeBytes and
	// CodeFiles.MaxFileBytes (the worst case of JSON escaping) plus 64 KiB
	// of framing.
	MaxRequestBytes int64
	// RequestBudget bounds, in bytes, the bodies of large HTTP requests
	// (over 1 MiB) being read and handled at once; one beyond it waits
	// unread. The handler holds about five times a body while it decodes
	// it. Default MaxRequestBytes: one largest request at a time, or many
	// smaller ones. Never below MaxRequestBytes.
	RequestBudget int64
	// BodyTimeout is how long an HTTP client has to send a request's body
	// once its headers are in; a slower one is cut off. Default 1m.
	BodyTimeout time.Duration
	// CodeFiles configures the session's code files and runs history
	// (package codefiles). Its Keys and Logger default to the frontend's.
	CodeFiles codefiles.Config
	// AllowURLRequirements accepts "name @ https://..." packages (the
	// workers must allow them too). Default false.
	AllowURLRequirements bool
	// InstallTimeout bounds building an environment (install_dependencies,
	// configure_environment). Default 10m.
	InstallTimeout time.Duration
	// ProgressInterval is the least time between two progress
	// notifications of one call. Default 250ms.
	ProgressInterval time.Duration
	// TargetCheck is how often a call whose job was sent to one worker
	// checks that worker's presence (republishing to the pool when it has
	// lapsed). Default 2s.
	TargetCheck time.Duration
	// AnnounceWait is how long a call that finds no live worker in the
	// pool waits for one to announce itself before it is refused: a
	// worker renews its presence every 5 seconds, so after the state
	// store lost the records (an outage past their expiry) they are back
	// within one heartbeat. Default 6s.
	AnnounceWait time.Duration
	// Access is who may call over HTTP, and from which pages (see package
	// auth). The zero value: no authentication, and no browser page may
	// call.
	Access auth.Policy
	// FairShare is how many jobs of one tenant (of one session scope,
	// without authentication) the frontend lets into the queue at once;
	// the rest wait for their turn (fair.go). 0: the slots of the pool's
	// live workers plus a quarter more, at least 2. Negative: no limit,
	// jobs are queued as they come.
	FairShare int
	// Quotas are each tenant's quotas (quotas.go). nil: none.
	Quotas *quota.Table
	// WorkspaceTTL is how long a workspace with a handle counts against its
	// tenant's workspaces quota after its last use. Default 30 days.
	WorkspaceTTL time.Duration
	// Keys builds state-store keys. Default prefix statestore.DefaultPrefix.
	Keys statestore.Keys
	// Version is reported to clients in the initialize result.
	Version string
	// Logger receives the frontend's logs. Default slog.Default().
	Logger *slog.Logger
	// Probe serves /metrics, /healthz and /readyz beside /mcp; the
	// frontend adds its readiness checks to it. Default: a new one.
	Probe *telemetry.Probe
}

// Defaults.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultMaxCodeBytes = 16 << 20
	DefaultQueueWait    = 2 * time.Minute
	DefaultAnnounceWait = 6 * time.Second
	DefaultWorkspaceTTL = 30 * 24 * time.Hour
)

// WithDefaults returns c with every unset field given its default.
func (c Config) WithDefaults() Config {
	if c.Pool == "" {
		c.Pool = wire.DefaultPool
	}
	if c.DefaultTimeout <= 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = wire.DefaultMaxTimeout
	}
	if c.DefaultTimeout > c.MaxTimeout {
		c.DefaultTimeout = c.MaxTimeout
	}
	if c.MaxCodeBytes <= 0 {
		c.MaxCodeBytes = DefaultMaxCodeBytes
	}
	if c.QueueWait <= 0 {
		c.QueueWait = DefaultQueueWait
	}
	if c.Keys.Prefix == "" {
		c.Keys.Prefix = statestore.DefaultPrefix
	}
	if c.InstallTimeout <= 0 {
		c.InstallTimeout = 10 * time.Minute
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 250 * time.Millisecond
	}
	if c.TargetCheck <= 0 {
		c.TargetCheck = 2 * time.Second
	}
	if c.AnnounceWait <= 0 {
		c.AnnounceWait = DefaultAnnounceWait
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Probe == nil {
		c.Probe = telemetry.NewProbe(c.Logger)
	}
	if c.WorkspaceTTL <= 0 {
		c.WorkspaceTTL = DefaultWorkspaceTTL
	}
	if c.CodeFiles.Keys.Prefix == "" {
		c.CodeFiles.Keys = c.Keys
	}
	if c.CodeFiles.Logger == nil {
		c.CodeFiles.Logger = c.Logger
	}
	c.CodeFiles = c.CodeFiles.WithDefaults()
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = maxRequestBytes(c)
	}
	if c.BodyTimeout <= 0 {
		c.BodyTimeout = time.Minute
	}
	if c.RequestBudget < c.MaxRequestBytes {
		c.RequestBudget = c.MaxRequestBytes
	}
	return c
}

// Frontend serves codexec's MCP tools.
type Frontend struct {
	cfg    Config
	broker *broker.Broker
	store  statestore.Store
	files  *codefiles.CodeStore
	log    *slog.Logger
	bodies *bodyLimit // of the last HTTPHandler (tests watch it)
	// callers counts each identified caller's HTTP requests in progress
	// (boundCallers).
	callers callerRequests
	// batchReads bounds the job results get_job_results reads at once, all
	// its calls together (maxBatchReads).
	batchReads chan struct{}
	// sessionless cancels the sessionless requests in progress on the
	// notifications/cancelled of their own caller (cancelbind.go)
	sessionless sessionlessCancels
	// unqueued are the jobs whose publishing this frontend is still
	// retrying, or gave up (see submit.go).
	unqueued unqueuedJobs
	// fair admits jobs to the queue, each tenant up to its share (fair.go).
	fair fairGate
	// gpuJobs are this frontend's GPU jobs still running (gpu.go).
	gpuJobs gpuInflight
	// slots are the jobs holding a place of their tenant's jobs quota (quotas.go).
	slots quotaSlots
	// revocations are the operator's, as last read (revoke.go).
	revocations revocations
	// owners are the scopes whose owner this frontend recorded (owners.go).
	owners ownersNoted
	// awaiting are the jobs this frontend's calls wait for (revoke.go).
	awaiting awaited
	// cancelsLater counts the cancel marks written again in the background
	// (cancel.go).
	cancelsLater sync.WaitGroup

	// What the frontend last knew of the state store (memory.go), for
	// when the store does not answer.
	envs     *envMemory
	presence presenceMemory
	holders  holderMemory

	// Stopping (Drain, Abort): calls running when the frontend is told to
	// stop finish and answer; hard ends them.
	draining  atomic.Bool
	hard      context.Context
	abort     context.CancelFunc
	openCalls sync.WaitGroup
	// tasks are the tasks running here, taskSlots their count and size
	// (tasks.go).
	tasks     sync.WaitGroup
	taskSlots taskSlots

	// transportSessions are the sessions the HTTP transport holds
	// (countTransportSessions, sessionbind.go).
	transportSessions atomic.Int64

	// stdioLimit is the largest message ServeStdio writes; 0 is
	// StdioMessageLimit (tests make it smaller).
	stdioLimit int
}

// New returns a Frontend that publishes jobs through b and reads shared
// state from st.
func New(cfg Config, b *broker.Broker, st statestore.Store) (*Frontend, error) {
	cfg = cfg.WithDefaults()
	if !wire.ValidPool(cfg.Pool) {
		return nil, fmt.Errorf("frontend: invalid pool name %q", cfg.Pool)
	}
	if cfg.CodeFiles.MirrorDir != "" {
		abs, err := filepath.Abs(cfg.CodeFiles.MirrorDir)
		if err != nil {
			return nil, fmt.Errorf("frontend: files mirror directory: %w", err)
		}
		cfg.CodeFiles.MirrorDir = abs
	}
	hard, abort := context.WithCancel(context.Background())
	f := &Frontend{cfg: cfg, broker: b, store: st, files: codefiles.NewCodeStore(st, cfg.CodeFiles), log: cfg.Logger,
		envs: newEnvMemory(maxRememberedSessions), holders: holderMemory{recent[string]{max: maxRememberedSessions}}, hard: hard, abort: abort,
		batchReads: make(chan struct{}, maxBatchReads)}
	f.watch(cfg.Probe)
	return f, nil
}

// serverName is the name the server gives in initialize's serverInfo and
// in the _meta of every result of revision 2026-07-28.
const serverName = "codexec"

const instructions = `codexec runs Python for you. execute_code runs a snippet in a fresh process
and returns stdout, stderr and the exit status; isError is true exactly when the code failed
(exception, non-zero exit, timeout, limit); every result names its job, and get_job_result
fetches a job's result again (after a call that was cut off, say). Each session has its own
working directory, which persists between calls, so files written by one call can be read by the
next. Variables do not persist between execute_code calls; for that, create_context starts a live
interpreter (a context), run_in_context runs code in it notebook-style, keeping its variables,
and list_contexts, reset_context and close_context manage contexts.
Figures (plt.show(), or left open) and display(obj) pictures come back as images; files a call
wrote come back as resource links; upload_file puts a file there, resources/read of
codexec://workspace/<path> reads one back. Output past its cap keeps its start and its end.
For a script too large for one message, initialize_code_file starts it, append_to_code_file adds
pieces, read_code_file reads it back and execute_code_file runs it. list_code_files lists the
session's code files and its recent runs; read_code_file with a job_id shows the code a run ran;
delete_code_file deletes a file.
Packages: install_dependencies installs packages for this session (a new environment, built in
seconds and cached; the session switches to it), check_installed_packages checks names or import
names, configure_environment picks an existing environment or a Python version and package set,
get_environment_config shows the current one.
Workspaces: workspace_info returns this session's workspace handle; pass it as the argument
workspace of any tool from a later session to reach the same files, runs and environment;
new_workspace makes an empty one.`

// MCPServer builds the MCP server with every tool registered. stdio says
// whether it will be served on stdio (one session) or over HTTP.
func (f *Frontend) MCPServer(stdio bool) *server.MCPServer {
	var s *server.MCPServer
	tool := func(name string) *mcp.Tool {
		if t := s.GetTool(name); t != nil {
			return &t.Tool
		}
		return nil
	}
	var fit []server.ServerOption
	if stdio {
		// Outermost: it sees the result as it will be sent.
		fit = append(fit, server.WithToolHandlerMiddleware(f.fitStdioResults))
	}
	s = server.NewMCPServer(serverName, f.cfg.Version, append(fit,
		server.WithToolCapabilities(false),
		server.WithInstructions(instructions),
		server.WithRecovery(),
		server.WithToolHandlerMiddleware(f.keepThroughDrain),
		server.WithTaskCapabilities(true, true, true), // answered by taskRouter (tasks.go)
		server.WithToolHandlerMiddleware(f.useWorkspace(stdio, tool)),
		server.WithToolHandlerMiddleware(linksAsText), // around linkWorkspace: sees its links
		server.WithToolHandlerMiddleware(linkWorkspace),
	)...)
	f.registerTools(s, stdio)
	f.registerWorkspaceTools(s, stdio)
	addWorkspaceArg(s)
	return s
}

// ServeStdio serves MCP on in/out until ctx ends or in reaches EOF.
// Logs never go to out.
func (f *Frontend) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	srv := f.MCPServer(true)
	ss := server.NewStdioServer(srv)
	ss.SetErrorLogger(log.New(slogWriter{f.log}, "", 0))
	server.WithWorkerPoolSize(32)(ss) // concurrent tool calls on one stdio session
	in, out, waitTasks := f.taskStdio(ctx, srv, in, out)
	err := ss.Listen(ctx, in, out)
	waitTasks()
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// HTTPHandler returns the Streamable HTTP handler, mounted at /mcp behind
// the bound on request bodies (MaxRequestBytes, RequestBudget: see
// bodyLimit), the whole behind the Access policy (origins, credentials),
// and the underlying server so the caller can shut its sessions down.
func (f *Frontend) HTTPHandler() (http.Handler, *server.StreamableHTTPServer) {
	srv := f.MCPServer(false)
	f.countTransportSessions(srv)
	h := server.NewStreamableHTTPServer(srv,
		server.WithEndpointPath("/mcp"),
		server.WithHTTPContextFunc(httpContext),
		server.WithStreamableHTTPLogger(f.log),
	)
	f.bodies = newBodyLimit(f.taskHTTP(srv, sessionsOutliveDelete(bindSessions(forgetInitialized(h)))), f.cfg.MaxRequestBytes, f.cfg.RequestBudget, f.cfg.BodyTimeout, f.log)
	mux := http.NewServeMux()
	mux.Handle("/mcp", f.refuseRevoked(f.boundCallers(f.bodies)))
	f.mountProbe(mux)
	return f.cfg.Access.Handler(mux, "/mcp"), h
}

// Drain tells the frontend that it is stopping: from now on a call already
// running is no longer cancelled when its request's context ends (the end
// of stdio input, the server's shutdown, a client that went away), so that
// it finishes and its answer is written; the server stops taking new calls
// on its own side. Abort ends what is still running. WaitCalls waits for
// the calls running.
func (f *Frontend) Drain() { f.draining.Store(true) }

// Abort cancels every call still running (after Drain, once the grace
// period is over).
func (f *Frontend) Abort() { f.abort() }

// WaitCalls waits until no call runs, or until ctx ends.
func (f *Frontend) WaitCalls(ctx context.Context) error {
	done := make(chan struct{})
	go func() { f.openCalls.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// keepThroughDrain wraps every tool handler: the call is counted while it
// runs, and its context is cancelled when the request's is, unless the
// frontend is draining by then, and when Abort is called.
func (f *Frontend) keepThroughDrain(next server.ToolHandlerFunc) server.ToolHandlerFunc {
	return func(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.openCalls.Add(1)
		defer f.openCalls.Done()
		cctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		defer cancel(nil)
		stopReq := context.AfterFunc(ctx, func() {
			if !f.draining.Load() {
				cancel(context.Cause(ctx))
			}
		})
		defer stopReq()
		stopHard := context.AfterFunc(f.hard, func() { cancel(errFrontendStopped) })
		defer stopHard()
		return next(cctx, req)
	}
}

type slogWriter struct{ l *slog.Logger }

func (w slogWriter) Write(p []byte) (int, error) {
	w.l.Warn(string(p))
	return len(p), nil
}
