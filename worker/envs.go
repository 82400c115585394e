package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/runner"
)

// openEnvCache opens the cache of built environments (DataDir/envcache) and
// computes the capabilities the worker advertises.
func (w *Worker) openEnvCache(ctx context.Context) error {
	dir, err := filepath.Abs(filepath.Join(w.cfg.DataDir, "envcache"))
	if err != nil {
		return fmt.Errorf("worker: environment cache: %w", err)
	}
	managers := map[string]envcache.Manager{}
	names := w.cfg.Managers
	if len(names) == 0 {
		names = []string{envspec.ManagerVenv, envspec.ManagerUV, envspec.ManagerConda}
	}
	for _, name := range names {
		switch strings.ToLower(strings.TrimSpace(name)) {
		case envspec.ManagerVenv:
			managers[envspec.ManagerVenv] = &envcache.Venv{PipCacheDir: filepath.Join(dir, "pip-cache")}
		case envspec.ManagerUV, "venv-uv":
			managers[envspec.ManagerUV] = &envcache.UV{CacheDir: filepath.Join(dir, "uv-cache")}
		case envspec.ManagerConda:
			managers[envspec.ManagerConda] = &envcache.Conda{}
		default:
			return fmt.Errorf("worker: unknown environment manager %q (venv, uv or conda)", name)
		}
	}
	var confine envcache.Confiner
	if w.box != nil {
		// Installers run code from the packages they build: they get the
		// network, and write only the environment being built and the caches.
		confine = w.box.Installer()
	}
	c, err := envcache.New(envcache.Config{
		Dir: dir, BudgetBytes: w.cfg.EnvBudget, InstallerCacheBytes: w.cfg.InstallerCacheBudget, Managers: managers,
		DefaultPython: w.cfg.Python, Index: w.cfg.Index, AllowURLs: w.cfg.AllowURLRequirements,
		Logger: w.log.With("part", "envcache"), Confine: confine,
	})
	if err == nil {
		if w.cfg.FetchUV {
			w.provideUV(ctx, c, filepath.Join(w.cfg.DataDir, "tools", "uv"))
		}
		err = c.Start(ctx)
	}
	if err != nil {
		return fmt.Errorf("worker: environment cache: %w", err)
	}
	caps := c.Capabilities(ctx, w.cfg.Pythons)
	caps.Pool, caps.Labels = w.cfg.Pool, w.cfg.Labels
	for _, e := range w.cfg.ExistingEnvs {
		caps.Existing = append(caps.Existing, strings.TrimSpace(e))
	}
	w.cache, w.caps = c, caps
	w.log.Info("environment cache ready", "dir", dir, "managers", caps.Managers, "pythons", caps.Pythons)
	return nil
}

// provideUV fetches uv into dir when the uv manager is offered but no uv
// is installed (envcache.Cache.ProvideUV), so that a fresh machine gets
// uv's fast installs without a separate install step. A failure (no
// network, no pip) is logged, and environments are built with pip.
func (w *Worker) provideUV(ctx context.Context, c *envcache.Cache, dir string) {
	start := time.Now()
	bin, err := c.ProvideUV(ctx, dir)
	switch {
	case errors.Is(err, envcache.ErrUVOnPath):
	case err != nil:
		w.log.Warn("uv is not installed and could not be fetched: environments are built with pip", "err", err)
	default:
		w.log.Info("uv ready", "bin", bin, "ms", time.Since(start).Milliseconds())
	}
}

// ensureEnv builds or takes the job's environment, publishing the
// installer's output as progress when the job asks for it. The caller
// releases the Env. built (env.Built) says the environment was built for
// this job: it was not ready on disk before.
func (w *Worker) ensureEnv(ctx context.Context, job *wire.Job, log *slog.Logger) (env *envcache.Env, built bool, err error) {
	spec := *job.Env
	id := ""
	if _, sid, nerr := spec.Identity(); nerr == nil {
		id = sid
	}
	var progress *lineWriter
	if job.Progress {
		progress = &lineWriter{fn: func(line string) { _ = w.broker.PublishProgress(job.ID, envcache.RedactURLs(line)) }}
		progress.fn(fmt.Sprintf("preparing environment %s on %s", id, w.cfg.ID))
	}
	start := time.Now()
	if progress != nil {
		env, err = w.cache.Ensure(ctx, spec, progress)
		progress.Flush()
	} else {
		env, err = w.cache.Ensure(ctx, spec, nil)
	}
	observeEnv(ctx, env, time.Since(start), err)
	if err != nil {
		log.Warn("environment not ready", "env", id, "err", err)
		return nil, false, err
	}
	if env.Built {
		log.Info("environment ready", "env", env.ID, "ms", time.Since(start).Milliseconds())
		// Advertise it now, before the result goes out, so that placement
		// sends the session's next job here.
		if herr := w.heartbeat(context.WithoutCancel(ctx)); herr != nil {
			log.Warn("heartbeat after build", "err", herr)
		}
	}
	return env, env.Built, nil
}

// envFailure is the result of a job whose environment could not be made.
func (w *Worker) envFailure(job *wire.Job, attempt int, err error) *wire.Result {
	status := wire.StatusError
	if errors.Is(err, envspec.ErrBadSpec) || errors.Is(err, envspec.ErrBadRequirement) || errors.Is(err, envspec.ErrMarkerFalse) {
		status = wire.StatusRejected
	}
	res := w.result(job, attempt, status, "environment: "+firstLine(err.Error()))
	var be *envcache.BuildError
	if errors.As(err, &be) {
		res.Stderr = envcache.RedactURLs(be.Output) // the installer's: it may name an index with its credentials
		res.StderrBytes = int64(len(res.Stderr))
		if why := installerError(res.Stderr); why != "" {
			res.Message = fmt.Sprintf("environment: %s failed (%v): %s", installerName(be.Args), be.Err, why)
		}
	} else {
		res.Stderr = err.Error()
	}
	return res
}

// installerError is the installer's own error in its output, on one line:
// the first line that starts with "error" (uv's "error: ...", pip's
// "ERROR: ..."), with the indented lines that follow it (uv's "cause: ..."),
// at most maxInstallerError bytes; "" when there is none. It is what a
// failed build's message says, where it said the build's directory and the
// installer's command line, the reason only in the output below.
func installerError(out string) string {
	var parts []string
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimSpace(line)
		switch {
		case len(parts) == 0 && strings.HasPrefix(strings.ToLower(trimmed), "error"):
			parts = append(parts, trimmed)
		case len(parts) > 0 && trimmed != "" && trimmed != line && len(parts) < 4:
			parts = append(parts, trimmed) // indented: part of the error
		case len(parts) > 0:
			return capText(strings.Join(parts, " "), maxInstallerError)
		}
	}
	return capText(strings.Join(parts, " "), maxInstallerError)
}

// maxInstallerError bounds the installer's error in a failed build's
// message; the whole output is the result's stderr.
const maxInstallerError = 1000

func capText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// installerName is the command of args without its path and flags:
// "uv pip install" for /data/tools/uv/bin/uv pip install --no-config ...,
// "python -m pip install" for /env/bin/python -m pip install ....
func installerName(args []string) string {
	if len(args) == 0 {
		return "the installer"
	}
	name := []string{filepath.Base(args[0])}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-m" && i+1 < len(args): // python -m pip install
			name = append(name, a, args[i+1])
			i++
		case strings.HasPrefix(a, "-"):
			return strings.Join(name, " ")
		default:
			name = append(name, a)
		}
	}
	return strings.Join(name, " ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// envSpec is the runner.Spec of a job in env: its interpreter, and its
// activation applied over the same scrubbed environment as the default's.
func (w *Worker) envSpec(env *envcache.Env, script, dir, home string) runner.Spec {
	base := runner.ChildEnv(os.Environ(), "", home, w.cfg.EnvPassthrough, w.childExtra)
	return runner.Spec{
		Python: env.Python, Script: script, Dir: dir,
		Env:     env.Activation.Apply(base),
		Rlimits: runner.NoCoreFiles(),
	}
}

// runInstall makes sure the job's environment exists and reports what is
// installed in it.
func (w *Worker) runInstall(ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result {
	if job.Env == nil {
		return w.result(job, attempt, wire.StatusRejected, "an install job needs an environment")
	}
	start := time.Now()
	env, built, err := w.ensureEnv(ctx, job, log)
	if err != nil {
		return w.envFailure(job, attempt, err)
	}
	defer env.Release()
	dists, err := envcache.Installed(env.Dir)
	if err != nil {
		return w.result(job, attempt, wire.StatusInternal, "list installed packages: "+err.Error())
	}
	res := w.result(job, attempt, wire.StatusOK, fmt.Sprintf("environment %s ready (%d distributions)", env.ID, len(dists)))
	res.ExitCode, res.EnvID = 0, env.ID
	res.DurationMS = float64(time.Since(start).Microseconds()) / 1000
	res.Data, _ = json.Marshal(wire.InstallData{EnvID: env.ID, Installed: dists, BuildMS: res.DurationMS, Cached: !built})
	res.FinishedAt = time.Now().UTC()
	return res
}

// runInspect looks packages up in the job's environment by reading their
// metadata: nothing is imported.
func (w *Worker) runInspect(ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result {
	var dir, id string
	if job.Env == nil {
		dir, id = w.venvDir, envspec.DefaultID
	} else {
		env, _, err := w.ensureEnv(ctx, job, log)
		if err != nil {
			return w.envFailure(job, attempt, err)
		}
		defer env.Release()
		dir, id = env.Dir, env.ID
	}
	dists, err := envcache.Installed(dir)
	if err != nil {
		return w.result(job, attempt, wire.StatusInternal, "list installed packages: "+err.Error())
	}
	data := wire.InspectData{EnvID: id}
	found := 0
	for _, q := range job.Packages {
		a := wire.InspectAnswer{Query: q}
		if d, ok := envspec.Lookup(dists, q); ok {
			a.Found, a.Dist = true, d
			found++
		}
		data.Packages = append(data.Packages, a)
	}
	res := w.result(job, attempt, wire.StatusOK, fmt.Sprintf("%d of %d found", found, len(job.Packages)))
	res.ExitCode, res.EnvID = 0, id
	res.Data, _ = json.Marshal(data)
	return res
}

// lineWriter calls fn with each complete line written to it (and, on
// Flush, with what is left). A line longer than maxLineBytes is passed on
// in pieces of that size, so that an installer that never ends its line
// (a progress bar redrawn with \r) costs bounded memory. Safe for
// concurrent use.
type lineWriter struct {
	fn  func(string)
	mu  sync.Mutex
	buf bytes.Buffer
}

// maxLineBytes is the longest line a lineWriter holds back.
const maxLineBytes = 4 << 10

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(p)
	for {
		i := bytes.IndexByte(l.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf.Next(i + 1))
	}
	for l.buf.Len() >= maxLineBytes {
		l.emit(l.buf.Next(maxLineBytes))
	}
	if l.buf.Len() == 0 {
		l.buf.Reset() // let the buffer's storage be reused from its start
	}
	return len(p), nil
}

func (l *lineWriter) emit(b []byte) {
	if line := strings.TrimRight(string(b), "\r\n"); line != "" {
		l.fn(line)
	}
}

// Flush sends what is left of an unterminated last line.
func (l *lineWriter) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rest := strings.TrimSpace(l.buf.String()); rest != "" {
		l.fn(rest)
	}
	l.buf.Reset()
}
