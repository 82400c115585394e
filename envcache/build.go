package envcache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"time"

	"github.com/codexec/codexec/envspec"
)

// maxBuildAttempts bounds the loop of Ensure when another process evicts an
// environment between our build and our taking it (flock conversion is not
// atomic).
const maxBuildAttempts = 3

// flight is one build, or first take, of an environment, shared by every
// Ensure that asks for it meanwhile.
type flight struct {
	done     chan struct{}
	cancel   context.CancelFunc
	waiters  int // callers still waiting; at 0 the build is cancelled
	out      *fanout
	finished bool         // under Cache.mu; then meta and err are set
	meta     envMeta      // on success
	err      error        // on failure
	built    bool         // on success: this flight built it
	spec     envspec.Spec // the spec that started it
	manager  Manager      // its manager
}

// fly runs a flight: takes the environment from disk or builds it, then
// hands a reference to every waiter.
func (c *Cache) fly(ctx context.Context, id string, fl *flight) {
	defer c.background.Done()
	defer fl.cancel()
	meta, lock, built, err := c.acquire(ctx, id, fl.spec, fl.manager, fl.out)

	c.mu.Lock()
	fl.finished = true
	if c.flights[id] == fl {
		delete(c.flights, id)
	}
	switch {
	case err == nil:
		fl.meta, fl.built = meta, built
		h := c.held[id]
		if h == nil {
			h = &holder{}
			c.held[id] = h
		}
		h.meta = meta
		if fl.waiters > 0 && h.lock == nil {
			h.lock, lock = lock, nil
		}
		h.refs += fl.waiters
		if lock != nil {
			lock.close() // no waiters left, or another flight's lock serves
		}
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		// Every waiter left: nothing to remember.
	case c.cfg.FailureTTL > 0:
		now := c.now()
		// A failure is otherwise removed only when its spec is asked for
		// again: each distinct spec that failed once (a package name that
		// does not exist, with a counter in it) stayed in memory with up to
		// 64 KiB of the installer's output for as long as the worker ran.
		for k, f := range c.failures {
			if !now.Before(f.until) {
				delete(c.failures, k)
			}
		}
		c.failures[id] = failure{err: err, at: now, until: now.Add(c.cfg.FailureTTL)}
	}
	fl.err = err
	close(fl.done)
	c.mu.Unlock()

	if built || err != nil {
		c.pruneSoon()
	}
	if err != nil {
		c.log.Warn("environment build failed", "env", id, "spec", fl.spec.String(), "err", firstLines(err.Error(), 1))
		return
	}
	if built {
		c.log.Info("environment built", "env", id, "spec", fl.spec.String(), "size_bytes", meta.SizeBytes,
			"build_ms", meta.BuildMillis, "seed", meta.Seed)
		c.trimSoon()
	}
}

// acquire returns the ready environment id with a shared lock on it,
// building it first under the exclusive lock when it is not ready.
func (c *Cache) acquire(ctx context.Context, id string, n envspec.Spec, m Manager, out io.Writer) (envMeta, *fileLock, bool, error) {
	lk, err := openLock(c.lockPath(id))
	if err != nil {
		return envMeta{}, nil, false, err
	}
	fail := func(err error) (envMeta, *fileLock, bool, error) {
		lk.close()
		return envMeta{}, nil, false, err
	}
	built := false
	for range maxBuildAttempts {
		if err := lk.lock(ctx, false); err != nil {
			return fail(err)
		}
		if meta, ok := c.readyMeta(id, m); ok {
			if c.now().Sub(meta.LastUsed) > touchInterval {
				meta.LastUsed = c.now()
				c.writeMetaLogged(meta)
			}
			return meta, lk, built, nil
		}
		if err := lk.lock(ctx, true); err != nil {
			return fail(err)
		}
		if _, ok := c.readyMeta(id, m); !ok { // nobody built it meanwhile
			if err := c.build(ctx, id, n, m, out); err != nil {
				return fail(err)
			}
			built = true
		}
		// Back to shared (not atomic: an evictor elsewhere may slip in,
		// and then the loop builds again).
	}
	return fail(fmt.Errorf("envcache: %s was evicted by another process %d times right after it was built", id, maxBuildAttempts))
}

// readyMeta returns the metadata of id when the environment is ready: its
// metadata file exists and its interpreter is still there.
func (c *Cache) readyMeta(id string, m Manager) (envMeta, bool) {
	data, err := os.ReadFile(c.metaPath(id))
	if err != nil {
		return envMeta{}, false
	}
	var meta envMeta
	if err := json.Unmarshal(data, &meta); err != nil || meta.ID != id {
		c.log.Warn("unreadable environment metadata; rebuilding", "env", id, "err", err)
		return envMeta{}, false
	}
	if fi, err := os.Stat(m.Python(c.envDir(id))); err != nil || !fi.Mode().IsRegular() {
		c.log.Warn("environment marked ready has no interpreter; rebuilding", "env", id)
		return envMeta{}, false
	}
	return meta, true
}

// build builds id under its exclusive lock and writes its metadata, which
// makes it ready.
func (c *Cache) build(ctx context.Context, id string, n envspec.Spec, m Manager, out io.Writer) error {
	dir := c.envDir(id)
	// Whatever is here is the remains of an interrupted build or a broken
	// environment, and nobody uses it: we hold the exclusive lock.
	if err := os.Remove(c.metaPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("envcache: %w", err)
	}
	if err := c.removeDir(dir); err != nil {
		return err
	}
	reqs, err := n.Requirements(c.cfg.AllowURLs)
	if err != nil {
		return fmt.Errorf("%w: %w", envspec.ErrBadSpec, err)
	}
	if err := c.available(ctx, m); err != nil {
		return fmt.Errorf("envcache: cannot build %s: %w", n.String(), err)
	}
	req := CreateRequest{Python: n.Python, Packages: reqs, Index: c.cfg.Index, Confine: c.cfg.Confine}
	if n.Manager != envspec.ManagerConda {
		py, err := c.interpreter(n.Python)
		if err != nil {
			return fmt.Errorf("envcache: cannot build %s: %w", n.String(), err)
		}
		req.Interpreter = py.path
	}
	if err := c.checkMarkers(req.Interpreter, n, reqs); err != nil {
		return err
	}
	var seedID string
	if n.Parent != "" && n.Parent != id {
		if seed, release := c.seed(n.Parent, n.Manager, req.Interpreter); seed != "" {
			defer release()
			req.Seed, seedID = seed, n.Parent
		}
	}

	start := c.now()
	if out != nil {
		fmt.Fprintf(out, "building %s (%s)\n", id, n.String())
	}
	release, err := c.holdInstallerCaches(ctx)
	if err != nil {
		return fmt.Errorf("envcache: cannot build %s: %w", n.String(), err)
	}
	err = m.Create(ctx, dir, req, out)
	release()
	if err != nil {
		if rerr := c.removeDir(dir); rerr != nil {
			c.log.Warn("remove failed build", "env", id, "err", rerr)
		}
		return err
	}
	size, err := diskUsage(dir)
	if err != nil {
		c.log.Warn("measure environment", "env", id, "err", err)
	}
	now := c.now()
	meta := envMeta{V: metaVersion, ID: id, Spec: n, Interpreter: req.Interpreter, SizeBytes: size,
		BuiltAt: now.UTC(), BuildMillis: now.Sub(start).Milliseconds(), LastUsed: now.UTC(), Seed: seedID}
	if err := c.writeMeta(meta); err != nil {
		return fmt.Errorf("envcache: mark %s ready: %w", id, err)
	}
	return nil
}

// seed returns the directory of the parent environment to build from, with
// a shared lock held until release, when the parent is ready here, was
// built by the same manager from the same interpreter, and no one is
// building or evicting it right now.
func (c *Cache) seed(parent, manager, interpreter string) (string, func()) {
	lk, err := openLock(c.lockPath(parent))
	if err != nil {
		return "", nil
	}
	if ok, err := lk.tryLock(false); err != nil || !ok {
		lk.close()
		return "", nil
	}
	data, err := os.ReadFile(c.metaPath(parent))
	var meta envMeta
	if err != nil || json.Unmarshal(data, &meta) != nil || meta.Spec.Manager != manager || meta.Interpreter != interpreter {
		lk.close()
		return "", nil
	}
	return c.envDir(parent), lk.close
}

// checkMarkers refuses a build of which a requirement's environment marker
// is false for the interpreter it is built with: that requirement would
// install nothing (uv and pip skip it without a word), and a new
// environment made for it would be its parent again under another name
// ("requests ; extra == 'x'" installed "requests" nowhere, yet the session
// moved to a new environment). Conda specs take no markers.
func (c *Cache) checkMarkers(interpreter string, n envspec.Spec, reqs []envspec.Requirement) error {
	if interpreter == "" {
		return nil
	}
	var env envspec.MarkerEnv
	for _, r := range reqs {
		if r.Marker == "" {
			continue
		}
		s := r.String()
		var err error
		if env == nil {
			if env, err = c.markerEnv(interpreter); err != nil {
				return fmt.Errorf("envcache: cannot build %s: %w", n.String(), err)
			}
		}
		ok, err := envspec.EvalMarker(r.Marker, env)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", envspec.ErrBadSpec, s, err)
		}
		if !ok {
			return fmt.Errorf("%s does not apply here (its marker is false for Python %s on %s %s): %w",
				s, env["python_full_version"], env["platform_system"], env["platform_machine"], envspec.ErrMarkerFalse)
		}
	}
	return nil
}

// markerEnv runs the interpreter once (see probeInfo: -E -S, a fixed
// script) for its marker variables, remembered for the cache's life.
func (c *Cache) markerEnv(interpreter string) (envspec.MarkerEnv, error) {
	c.mu.Lock()
	env, ok := c.markerEnvs[interpreter]
	c.mu.Unlock()
	if ok {
		return env, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var stdout, stderr cappedOutput
	cmd := exec.CommandContext(ctx, interpreter, "-E", "-S", "-c", envspec.MarkerEnvScript)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("read the marker variables of %s: %v: %s", interpreter, err, firstLines(stderr.String(), 3))
	}
	if err := json.Unmarshal([]byte(stdout.String()), &env); err != nil {
		return nil, fmt.Errorf("read the marker variables of %s: %w", interpreter, err)
	}
	c.mu.Lock()
	c.markerEnvs[interpreter] = env
	c.mu.Unlock()
	return env, nil
}
