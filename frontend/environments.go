package frontend

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/oklog/ulid/v2"
)

// The environment tools: configure_environment, get_environment_config,
// install_dependencies and check_installed_packages. A session's
// environment is an envcache spec kept in the state store (the session's
// hash, field "env"); no spec means the workers' default environment. Every
// job of the session carries it, and placement sends the job to a live
// worker that holds it, else to one that can build it. Installing never
// changes an environment: it derives a new spec (envspec.Derive), builds
// it with an install job, and switches the session to it.

// sessionEnvField is the field of Keys.Session(scope) holding the session's
// environment (JSON sessionEnv).
const sessionEnvField = "env"

// MaxPackages is how many items one install_dependencies,
// check_installed_packages or configure_environment call may name.
const MaxPackages = 100

type sessionEnv struct {
	Spec    envspec.Spec `json:"spec"`
	ID      string       `json:"id"`
	Updated time.Time    `json:"updated"`
}

// EnvResult is the structured content of the environment tools.
type EnvResult struct {
	Status string `json:"status" jsonschema_description:"ok, error (the build failed), rejected (bad input, nothing changed) or internal"`
	EnvID  string `json:"env_id" jsonschema_description:"the session's environment id ('default' for the workers' default environment)"`
	// Spec is the session's environment spec; absent for the default one.
	Spec *envspec.Spec `json:"spec,omitempty"`
	// State is default, ready (some live worker holds it) or not_built.
	State   string   `json:"state,omitempty"`
	Workers []string `json:"workers,omitempty" jsonschema_description:"live workers holding the environment"`
	// Installed lists what install_dependencies asked for (or, for
	// configure_environment, everything), with versions.
	Installed []envspec.Dist `json:"installed,omitempty"`
	// Packages answers check_installed_packages, one per asked name.
	Packages []wire.InspectAnswer `json:"packages,omitempty"`
	// Capabilities are what the live workers offer (get_environment_config).
	Capabilities []envspec.Advert `json:"capabilities,omitempty"`
	JobID        string           `json:"job_id,omitempty"`
	WorkerID     string           `json:"worker_id,omitempty"`
	DurationMS   float64          `json:"duration_ms,omitempty"`
	Output       string           `json:"output,omitempty" jsonschema_description:"the installer's output when a build failed"`
	Message      string           `json:"message"`
}

func envToolResult(r EnvResult, text string) *mcp.CallToolResult {
	if text == "" {
		text = r.Message
	}
	if r.Output != "" {
		text += "\n--- installer output ---\n" + r.Output
	}
	out := mcp.NewToolResultStructured(r, text)
	out.IsError = r.Status != string(wire.StatusOK)
	return out
}

// sessionEnv returns the session's environment, nil for the default one.
// The state store's answer wins; when the store cannot answer, the
// environment this frontend last read or wrote for the session is used
// (envMemory), so that a session it has served keeps running while the
// store is down. For a session it has never seen it cannot know: the
// session may have chosen another environment through another frontend,
// and running its code in the default one would be silently wrong, so
// the call fails with ErrStoreUnreachable.
func (f *Frontend) sessionEnv(ctx context.Context, scope string) (*envspec.Spec, string, error) {
	data, err := f.store.HGet(ctx, f.cfg.Keys.Session(scope), sessionEnvField)
	if errors.Is(err, statestore.ErrNotFound) {
		f.envs.put(scope, nil, "")
		return nil, "", nil
	}
	if err != nil {
		return f.lastKnownEnv(scope, err)
	}
	var se sessionEnv
	if err := json.Unmarshal(data, &se); err != nil || se.ID == "" {
		f.envs.put(scope, nil, "")
		return nil, "", nil // unreadable: the default environment
	}
	f.envs.put(scope, &se.Spec, se.ID)
	return &se.Spec, se.ID, nil
}

// ErrStoreUnreachable is the error of a call that needs what only the
// state store knows while the store does not answer.
var ErrStoreUnreachable = errors.New("the state store (Redis) is unreachable")

// lastKnownEnv answers sessionEnv when the store failed with err.
func (f *Frontend) lastKnownEnv(scope string, err error) (*envspec.Spec, string, error) {
	k, ok := f.envs.get(scope)
	if !ok {
		return nil, "", fmt.Errorf("%w (%v) and this frontend has not seen this session before, "+
			"so it cannot tell which environment the session chose; nothing was run: try again once the store is back", ErrStoreUnreachable, err)
	}
	id := k.id
	if k.spec == nil {
		id = envspec.DefaultID
	}
	f.log.Warn("state store unreachable: using the session's last known environment", "scope", scope, "env", id, "err", err)
	return k.spec, k.id, nil
}

func (f *Frontend) setSessionEnv(ctx context.Context, scope string, spec *envspec.Spec, id string) error {
	if spec == nil {
		if err := f.store.HDel(ctx, f.cfg.Keys.Session(scope), sessionEnvField); err != nil {
			return err
		}
		f.envs.put(scope, nil, "")
		return nil
	}
	data, _ := json.Marshal(sessionEnv{Spec: *spec, ID: id, Updated: time.Now().UTC()})
	if err := f.store.HSet(ctx, f.cfg.Keys.Session(scope), sessionEnvField, data); err != nil {
		return err
	}
	f.envs.put(scope, spec, id)
	return nil
}

// progressForwarder forwards a job's progress lines to the client as MCP
// progress notifications, at most one per interval (the last line of a
// burst is sent when the next one is due or at stop).
type progressForwarder struct {
	ctx   context.Context
	srv   *server.MCPServer
	token mcp.ProgressToken
	every time.Duration
	// max is the most bytes of a line sent; 0 means 500.
	max int

	mu      sync.Mutex
	n       int
	last    time.Time
	pending string
}

func (p *progressForwarder) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if time.Since(p.last) < p.every {
		p.pending = s
		return
	}
	p.sendLocked(s)
}

func (p *progressForwarder) sendLocked(s string) {
	p.last, p.pending = time.Now(), ""
	if limit := cmp.Or(p.max, 500); len(s) > limit {
		s = s[:limit] + "..."
	}
	_ = p.srv.SendNotificationToClient(p.ctx, "notifications/progress", map[string]any{
		"progressToken": p.token, "progress": p.n, "message": s,
	})
}

func (p *progressForwarder) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending != "" {
		p.sendLocked(p.pending)
	}
}

// build runs an install job for spec (normalised) and waits for it,
// forwarding its progress when the request asked for progress.
func (f *Frontend) build(ctx context.Context, req mcp.CallToolRequest, scope string, spec envspec.Spec) (*wire.Result, *wire.InstallData, error) {
	id := spec.ID()
	now := time.Now().UTC()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindInstall, Pool: f.cfg.Pool, Scope: scope,
		Env: &spec, EnvID: id, TimeoutMS: f.cfg.InstallTimeout.Milliseconds(),
		EnqueuedAt: now, Deadline: now.Add(f.cfg.InstallTimeout + f.cfg.QueueWait),
	}
	if req.Params.Meta != nil && req.Params.Meta.ProgressToken != nil {
		if srv := server.ServerFromContext(ctx); srv != nil {
			job.Progress = true
			fw := &progressForwarder{ctx: ctx, srv: srv, token: req.Params.Meta.ProgressToken, every: f.cfg.ProgressInterval}
			stop, err := f.broker.SubscribeProgress(job.ID, fw.line)
			if err == nil {
				defer func() { stop(); fw.flush() }()
			}
		}
	}
	res, err := f.dispatchAndAwait(ctx, job)
	if err != nil {
		te := asToolError(err)
		te.EnvID, te.Spec = id, job.Env
		return nil, nil, te
	}
	if res.Status.Failed() {
		return nil, nil, &toolError{
			Status: res.Status, EnvID: id, Spec: job.Env, JobID: job.ID, WorkerID: res.WorkerID,
			DurationMS: res.DurationMS, Output: res.Stderr, Message: "building the environment failed: " + res.Message,
		}
	}
	var data wire.InstallData
	if err := json.Unmarshal(res.Data, &data); err != nil {
		return nil, nil, internal("the worker's answer for job %s is unreadable: %v", job.ID, err)
	}
	return res, &data, nil
}

// stringList reads an array-of-strings argument, rejecting other types and
// naming the bad item. A lone string is refused too, as the schema says: it
// was once taken as a one-item list, so that a client sending
// "numpy pandas" or "numpy,pandas" where it meant two items got an answer
// about one odd name instead of being told what the tool takes.
func stringList(args map[string]any, name string, required bool) ([]string, error) {
	v, present := args[name]
	if !present || v == nil {
		if required {
			return nil, rejected("missing required argument '%s' (a list of strings)", name)
		}
		return nil, nil
	}
	items, ok := v.([]any)
	if !ok {
		if _, isStr := v.(string); isStr {
			return nil, rejected("argument '%s' must be a list of strings, one item each, such as [\"numpy\", \"pandas>=2\"], not a string: nothing was done", name)
		}
		return nil, rejected("argument '%s' must be a list of strings", name)
	}
	if len(items) > MaxPackages {
		return nil, rejected("argument '%s' names %d items; at most %d are allowed", name, len(items), MaxPackages)
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok {
			return nil, rejected("item %d of '%s' is not a string: nothing was done", i+1, name)
		}
		out = append(out, s)
	}
	return out, nil
}

// parsePackages parses every item as a requirement; the first bad one is
// refused with its text, and nothing is installed.
func (f *Frontend) parsePackages(pkgs []string) error {
	var bad []string
	for _, p := range pkgs {
		if _, err := envspec.ParseRequirement(p, f.cfg.AllowURLRequirements); err != nil {
			bad = append(bad, err.Error())
		}
	}
	if len(bad) > 0 {
		return rejected("refused, nothing was installed: %s", strings.Join(bad, "; "))
	}
	return nil
}

// installedFor picks, from everything installed, the distributions the
// packages name (all of them when packages is empty).
func installedFor(all []envspec.Dist, packages []string) []envspec.Dist {
	if len(packages) == 0 {
		return all
	}
	var out []envspec.Dist
	for _, p := range packages {
		r, err := envspec.ParseRequirement(p, true)
		if err != nil {
			continue
		}
		if d, ok := envspec.Lookup(all, r.Name); ok {
			out = append(out, d)
		}
	}
	return out
}

func distList(ds []envspec.Dist) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = d.Name + "==" + d.Version
	}
	return strings.Join(parts, ", ")
}

var managerOfType = map[string]string{
	"conda": envspec.ManagerConda, "venv": envspec.ManagerVenv,
	"venv-uv": envspec.ManagerUV, "uv": envspec.ManagerUV,
}

func (f *Frontend) configureEnvironment(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	args := req.GetArguments()
	typ, err := optionalString(args, "type")
	if err != nil {
		return nil, rejected("argument 'type' must be a string: conda, venv, venv-uv or default")
	}
	typ = strings.ToLower(strings.TrimSpace(typ))
	if typ == envspec.DefaultID {
		// The default environment is the workers' own: what would choose
		// or build another is refused, not ignored.
		for _, name := range []string{"python_version", "packages", "conda_name", "venv_path", "uv_venv_path"} {
			switch v := args[name].(type) {
			case nil:
				continue
			case string:
				if strings.TrimSpace(v) == "" {
					continue
				}
			case []any:
				if len(v) == 0 {
					continue
				}
			}
			return nil, rejected("type default takes no %s: it goes back to the workers' default environment as it is; "+
				"for a Python version or packages give type venv or venv-uv (or install_dependencies), for an existing environment its type; nothing was changed", name)
		}
		if err := f.setSessionEnv(ctx, scope, nil, ""); err != nil {
			return nil, internal("cannot save the session's environment: %v", err)
		}
		return envToolResult(EnvResult{Status: "ok", EnvID: envspec.DefaultID, State: envspec.DefaultID,
			Message: "the session now uses the workers' default environment"}, ""), nil
	}
	manager, ok := managerOfType[typ]
	if !ok {
		if typ == "" {
			return nil, rejected("missing required argument 'type': conda, venv, venv-uv (or default)")
		}
		return nil, rejected("unknown environment type %q: use conda, venv, venv-uv (or default)", typ)
	}
	var existing string
	for _, name := range []string{"conda_name", "venv_path", "uv_venv_path"} {
		v, err := optionalString(args, name)
		if err != nil {
			return nil, err
		}
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		want := map[string]string{"conda_name": "conda", "venv_path": "venv", "uv_venv_path": "venv-uv"}[name]
		if want != typ && !(typ == "uv" && want == "venv-uv") {
			return nil, rejected("argument '%s' belongs to type %s, not %s", name, want, typ)
		}
		existing = v
	}
	python, err := optionalString(args, "python_version")
	if err != nil {
		return nil, rejected("argument 'python_version' must be a string such as \"3.12\"")
	}
	pkgs, err := stringList(args, "packages", false)
	if err != nil {
		return nil, err
	}
	if err := f.parsePackages(pkgs); err != nil {
		return nil, err
	}
	spec, err := envspec.Spec{Manager: manager, Python: python, Packages: pkgs, Existing: existing}.Normalize()
	if err != nil {
		return nil, rejected("%s", strings.TrimPrefix(err.Error(), envspec.ErrBadSpec.Error()+": "))
	}
	res, data, err := f.build(ctx, req, scope, spec)
	if err != nil {
		return nil, err
	}
	ws := &spec
	if err := f.setSessionEnv(ctx, scope, ws, data.EnvID); err != nil {
		return nil, internal("cannot save the session's environment: %v", err)
	}
	what := "built"
	if data.Cached {
		what = "ready"
	}
	msg := fmt.Sprintf("the session now uses environment %s (%s, %s on %s in %.0f ms)", data.EnvID, spec, what, res.WorkerID, res.DurationMS)
	return envToolResult(EnvResult{
		Status: "ok", EnvID: data.EnvID, Spec: ws, State: "ready", Workers: []string{res.WorkerID},
		Installed: installedFor(data.Installed, pkgs), JobID: res.JobID, WorkerID: res.WorkerID,
		DurationMS: res.DurationMS, Message: msg,
	}, msg+"\ninstalled: "+distList(installedFor(data.Installed, pkgs))), nil
}

// defaultManager is the manager install_dependencies derives from the
// default environment with: uv when a live worker has it (a derived uv
// environment costs tens of milliseconds), else venv.
func defaultManager(adverts []envspec.Advert) string {
	for _, a := range adverts {
		if slices.Contains(a.Capabilities.Managers, envspec.ManagerUV) {
			return envspec.ManagerUV
		}
	}
	return envspec.ManagerVenv
}

func (f *Frontend) installDependencies(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	pkgs, err := stringList(req.GetArguments(), "packages", true)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, rejected("argument 'packages' is empty: nothing to install")
	}
	if err := f.parsePackages(pkgs); err != nil {
		return nil, err
	}
	cur, curID, err := f.sessionEnv(ctx, scope)
	if err != nil {
		return nil, internal("cannot read the session's environment: %v", err)
	}
	var parent envspec.Spec
	if cur == nil {
		adverts, err := f.pool(ctx)
		if err != nil {
			return nil, internal("cannot read worker presence: %v", err)
		}
		parent = envspec.Spec{Manager: defaultManager(adverts)}
	} else {
		parent = *cur
		parent.Parent = ""
	}
	child, err := envspec.Derive(parent, pkgs)
	if errors.Is(err, envspec.ErrExistingEnv) {
		return nil, rejected("the session uses the existing environment %q, which codexec does not modify; "+
			"use configure_environment with type venv or venv-uv and packages to build a new one", parent.Existing)
	}
	if err != nil {
		return nil, rejected("%v", err)
	}
	if curID != "" {
		child.Parent = curID
	}
	res, data, err := f.build(ctx, req, scope, child)
	if err != nil {
		return nil, err
	}
	ws := &child
	if err := f.setSessionEnv(ctx, scope, ws, data.EnvID); err != nil {
		return nil, internal("cannot save the session's environment: %v", err)
	}
	got := installedFor(data.Installed, pkgs)
	msg := fmt.Sprintf("installed %s; the session now uses environment %s (%.0f ms on %s)", distList(got), data.EnvID, res.DurationMS, res.WorkerID)
	return envToolResult(EnvResult{
		Status: "ok", EnvID: data.EnvID, Spec: ws, State: "ready", Workers: []string{res.WorkerID},
		Installed: got, JobID: res.JobID, WorkerID: res.WorkerID, DurationMS: res.DurationMS, Message: msg,
	}, ""), nil
}

// queryRe is what check_installed_packages accepts: a distribution name or
// a (dotted) import name.
var queryRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$`)

func (f *Frontend) checkInstalledPackages(ctx context.Context, req mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	pkgs, err := stringList(req.GetArguments(), "packages", true)
	if err != nil {
		return nil, err
	}
	if len(pkgs) == 0 {
		return nil, rejected("argument 'packages' is empty: name distributions or modules to look up")
	}
	for _, p := range pkgs {
		if !queryRe.MatchString(strings.TrimSpace(p)) {
			return nil, rejected("%q is not a package or module name: give a distribution name (scikit-learn) or an import name (sklearn), "+
				"without a version, extras or spaces; nothing was looked up", p)
		}
	}
	cur, curID, err := f.sessionEnv(ctx, scope)
	if err != nil {
		return nil, internal("cannot read the session's environment: %v", err)
	}
	now := time.Now().UTC()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindInspect, Pool: f.cfg.Pool, Scope: scope,
		Env: cur, EnvID: curID, Packages: pkgs, TimeoutMS: f.cfg.InstallTimeout.Milliseconds(),
		EnqueuedAt: now, Deadline: now.Add(f.cfg.InstallTimeout + f.cfg.QueueWait),
	}
	res, err := f.dispatchAndAwait(ctx, job)
	if err != nil {
		te := asToolError(err)
		te.EnvID, te.Spec, te.JobID = curID, cur, job.ID
		return nil, te
	}
	if res.Status.Failed() {
		return nil, &toolError{Status: res.Status, EnvID: curID, Spec: cur, JobID: job.ID, Output: res.Stderr, Message: res.Message}
	}
	var data wire.InspectData
	if err := json.Unmarshal(res.Data, &data); err != nil {
		return nil, internal("the worker's answer for job %s is unreadable: %v", job.ID, err)
	}
	var b strings.Builder
	for _, a := range data.Packages {
		if a.Found {
			fmt.Fprintf(&b, "%s: installed (%s %s)\n", a.Query, a.Dist.Name, a.Dist.Version)
		} else {
			fmt.Fprintf(&b, "%s: not installed\n", a.Query)
		}
	}
	b.WriteString("[environment " + data.EnvID + "]")
	return envToolResult(EnvResult{Status: "ok", EnvID: data.EnvID, Spec: cur, Packages: data.Packages,
		JobID: job.ID, WorkerID: res.WorkerID, Message: res.Message}, b.String()), nil
}

func (f *Frontend) getEnvironmentConfig(ctx context.Context, _ mcp.CallToolRequest, scope string) (*mcp.CallToolResult, error) {
	cur, curID, err := f.sessionEnv(ctx, scope)
	if err != nil {
		return nil, internal("cannot read the session's environment: %v", err)
	}
	adverts, err := f.pool(ctx)
	if err != nil {
		return nil, internal("cannot read worker presence: %v", err)
	}
	// What the workers offer, but not which environments they hold: an
	// environment's id is a digest of its spec, so the list would let any
	// caller confirm a guess of the packages another tenant uses. Each
	// worker's list keeps the session's own environment only.
	// A caller with credentials (one of many tenants) is not shown what
	// tells it about the machines or about other tenants' work either:
	// host names, how busy each worker and device is.
	_, tenanted := auth.FromContext(ctx)
	caps := make([]envspec.Advert, len(adverts))
	for i, a := range adverts {
		a.Envs = nil
		if cur != nil && slices.Contains(adverts[i].Envs, curID) {
			a.Envs = []string{curID}
		}
		if tenanted {
			a = withoutActivity(a)
		}
		caps[i] = a
	}
	r := EnvResult{Status: "ok", Spec: cur, Capabilities: caps}
	if cur == nil {
		r.EnvID, r.State = envspec.DefaultID, envspec.DefaultID
		for _, a := range adverts {
			r.Workers = append(r.Workers, a.WorkerID)
		}
		r.Message = "the session uses the workers' default environment"
	} else {
		r.EnvID, r.State = curID, "not_built"
		for _, a := range adverts {
			if slices.Contains(a.Envs, curID) {
				r.Workers = append(r.Workers, a.WorkerID)
			}
		}
		if len(r.Workers) > 0 {
			r.State = "ready"
		}
		r.Message = fmt.Sprintf("the session uses environment %s (%s): %s", curID, *cur, r.State)
		if len(r.Workers) > 0 {
			r.Message += " on " + strings.Join(r.Workers, ", ")
		}
	}
	return envToolResult(r, ""), nil
}

// withoutActivity is a worker's advert without its host name and without
// what says how busy it and its devices are.
func withoutActivity(a envspec.Advert) envspec.Advert {
	a.Host, a.Load, a.Warm, a.GPUWaiting, a.GPUJobMS = "", 0, 0, 0, 0
	if len(a.GPUs) > 0 {
		a.GPUs = slices.Clone(a.GPUs) // the advert's own stays as it was
		for i := range a.GPUs {
			a.GPUs[i].Busy = false
		}
	}
	return a
}

func (f *Frontend) registerEnvTools(s *server.MCPServer, stdio bool) {
	s.AddTool(mcp.NewTool("configure_environment",
		mcp.WithDescription("Choose this session's Python environment: an existing one on the workers (conda_name, venv_path, uv_venv_path), "+
			"or a new one built from python_version and packages (built once, cached, shared by every session asking for the same). "+
			"Returns when it is ready. type 'default' goes back to the workers' default environment."),
		mcp.WithString("type", mcp.Required(), mcp.Enum("conda", "venv", "venv-uv", envspec.DefaultID), mcp.Description("environment manager")),
		mcp.WithString("conda_name", mcp.Description("name or prefix of a conda environment that exists on the workers (type conda)")),
		mcp.WithString("venv_path", mcp.Description("absolute path of a venv that exists on the workers (type venv)")),
		mcp.WithString("uv_venv_path", mcp.Description("absolute path of a uv venv that exists on the workers (type venv-uv)")),
		mcp.WithString("python_version", mcp.Description("Python version of a new environment, e.g. 3.12")),
		mcp.WithArray("packages", mcp.WithStringItems(), mcp.Description("requirements of a new environment, e.g. [\"numpy>=2\", \"pandas\"]")),
		taskSupport(),
		mcp.WithOutputSchema[EnvResult](),
		hints(destructive|idempotent|openWorld), // a new environment's packages come from the package index
	), handler(stdio, f.configureEnvironment, envFailure))
	s.AddTool(mcp.NewTool("get_environment_config",
		mcp.WithDescription("Show this session's environment: its spec, id, whether it is built and which workers hold it, and what the workers offer."),
		mcp.WithOutputSchema[EnvResult](),
		hints(readOnly),
	), handler(stdio, f.getEnvironmentConfig, envFailure))
	s.AddTool(mcp.NewTool("install_dependencies",
		mcp.WithDescription("Install packages for this session: a new environment with the session's packages plus these is built "+
			"(others' environments are never changed) and the session switches to it. Each item is one requirement such as "+
			"\"requests\" or \"numpy>=2,<3\"; options, paths and URLs are refused. Progress is streamed while it builds."),
		mcp.WithArray("packages", mcp.Required(), mcp.WithStringItems(), mcp.Description("requirements to install")),
		taskSupport(),
		mcp.WithOutputSchema[EnvResult](),
		// Destructive: the session's environment is replaced, and a
		// requirement may change the version of a package it had.
		hints(destructive|idempotent|openWorld),
	), handler(stdio, f.installDependencies, envFailure))
	s.AddTool(mcp.NewTool("check_installed_packages",
		mcp.WithDescription("Check whether packages are installed in this session's environment, by distribution name (scikit-learn) "+
			"or import name (sklearn), with versions. Nothing is imported."),
		mcp.WithArray("packages", mcp.Required(), mcp.WithStringItems(), mcp.Description("distribution or import names")),
		mcp.WithOutputSchema[EnvResult](),
		hints(readOnly),
	), handler(stdio, f.checkInstalledPackages, envFailure))
}
