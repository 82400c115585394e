package envcache

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Config.
const (
	DefaultBudgetBytes int64 = 20 << 30
	DefaultFailureTTL        = 2 * time.Minute
	DefaultPython            = "python3"
)

// touchInterval is how stale an environment's recorded last use may get
// before a use rewrites it: often enough for LRU, rarely enough that jobs
// do not each write a file.
const touchInterval = time.Minute

// maxBuildAttempts bounds the loop of Ensure when another process evicts an
// environment between our build and our taking it (flock conversion is not
// atomic).
const maxBuildAttempts = 3

// metaVersion is the format of the metadata files.
const metaVersion = 1

// ErrClosed is returned by Ensure after Close.
var ErrClosed = errors.New("envcache: cache closed")

// Config configures a Cache. The zero value of every field but Dir is
// usable.
type Config struct {
	// Dir holds everything: envs/<id>/ (the environments), meta/<id>.json
	// (their metadata; present means ready), locks/<id>.lock, trash/ (what
	// is being deleted) and the installers' caches (uv-cache/, pip-cache/)
	// for the default managers. Required. Several processes may share it.
	Dir string
	// BudgetBytes is the disk the environments may use together; when a
	// build or a release leaves them above it, unused environments are
	// evicted, least recently used first. 0 means DefaultBudgetBytes (20
	// GiB); negative means no limit. Environments in use are never
	// evicted, so the cache may stay above budget while they are.
	BudgetBytes int64
	// FailureTTL is how long a failed build is remembered: Ensure for the
	// same environment fails at once with the same error until then. 0
	// means DefaultFailureTTL (2 minutes); negative means failures are not
	// remembered.
	FailureTTL time.Duration
	// Managers builds each kind of environment, by name ("venv", "uv",
	// "conda"). nil means all three: &Venv{PipCacheDir: Dir/pip-cache},
	// &UV{CacheDir: Dir/uv-cache} and &Conda{}. A spec whose manager is
	// missing here is refused.
	Managers map[string]Manager
	// DefaultPython is the interpreter for specs with no python: a path, a
	// command name, or a version (see ResolvePython). "" means "python3".
	DefaultPython string
	// Index says where pip and uv get packages (see IndexConfig).
	Index IndexConfig
	// AllowURLs permits "name @ https://..." packages; false refuses them.
	AllowURLs bool
	// Confine, when not nil, confines every command of every build (the
	// installers and the interpreters they start, which run the packages'
	// build scripts): see Confiner and CreateRequest.Confine. nil runs
	// them as the worker's own processes, with all its rights.
	Confine Confiner
	// Logger receives builds and evictions; nil discards.
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.BudgetBytes == 0 {
		c.BudgetBytes = DefaultBudgetBytes
	}
	if c.FailureTTL == 0 {
		c.FailureTTL = DefaultFailureTTL
	}
	if c.DefaultPython == "" {
		c.DefaultPython = DefaultPython
	}
	if c.Managers == nil && c.Dir != "" {
		c.Managers = map[string]Manager{
			envspec.ManagerVenv:  &Venv{PipCacheDir: filepath.Join(c.Dir, "pip-cache")},
			envspec.ManagerUV:    &UV{CacheDir: filepath.Join(c.Dir, "uv-cache")},
			envspec.ManagerConda: &Conda{},
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.Dir == "" {
		return errors.New("no directory (Dir) given")
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("the directory (Dir) %s is not an absolute path", c.Dir)
	}
	for name, m := range c.Managers {
		if m == nil || m.Name() != name {
			return fmt.Errorf("the manager configured as %q (Managers) is not one called %q", name, name)
		}
	}
	return nil
}

// Cache is a worker's on-disk cache of environments, each built once per
// spec (per ID) however many goroutines and processes ask for it at once,
// kept within a disk budget by least-recently-used eviction of the ones not
// in use. See the package documentation for the layout and the locking.
// Its methods are safe for concurrent use.
type Cache struct {
	cfg                                  Config
	log                                  *slog.Logger
	envsDir, metaDir, locksDir, trashDir string
	now                                  func() time.Time // tests replace it
	onJoin                               func(id string)  // tests: called when a caller has joined a flight
	budget                               atomic.Int64     // Config.BudgetBytes; tests change it

	mu         sync.Mutex
	closed     bool
	flights    map[string]*flight   // builds (or first takes) in progress
	held       map[string]*holder   // ready environments this process knows
	failures   map[string]failure   // remembered build failures
	existing   map[string]string    // id → resolved dir of existing environments
	pythons    map[string]pyVersion // DefaultPython or version → interpreter
	ready      map[string]bool      // managers found available
	trimming   bool
	trimAgain  bool
	background sync.WaitGroup

	trimMu sync.Mutex // one Trim at a time
}

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
	spec     envspec.Spec // the spec that started it
	manager  Manager      // its manager
}

// holder counts this process's users of a ready environment; while there
// are any it holds a shared lock on the environment, which keeps every
// process's eviction away.
type holder struct {
	refs int
	lock *fileLock // non-nil exactly while refs > 0
	meta envMeta
}

type failure struct {
	err   error
	at    time.Time
	until time.Time
}

type pyVersion struct{ path, version string }

// envMeta is the metadata file of a ready environment. Written last by a
// build, its presence is what makes the environment ready.
type envMeta struct {
	V           int          `json:"v"`
	ID          string       `json:"id"`
	Spec        envspec.Spec `json:"spec"`
	Interpreter string       `json:"interpreter,omitempty"`
	SizeBytes   int64        `json:"size_bytes"`
	BuiltAt     time.Time    `json:"built_at"`
	BuildMillis int64        `json:"build_ms"`
	LastUsed    time.Time    `json:"last_used"`
	Seed        string       `json:"seed,omitempty"`
}

// New checks cfg, creates its directories and returns the cache. It starts
// a background sweep that removes the remains of interrupted builds and
// evictions; Close waits for it.
func New(cfg Config) (*Cache, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("envcache: %w", err)
	}
	c := &Cache{
		cfg:      cfg,
		log:      cfg.Logger,
		envsDir:  filepath.Join(cfg.Dir, "envs"),
		metaDir:  filepath.Join(cfg.Dir, "meta"),
		locksDir: filepath.Join(cfg.Dir, "locks"),
		trashDir: filepath.Join(cfg.Dir, "trash"),
		now:      time.Now,
		flights:  map[string]*flight{},
		held:     map[string]*holder{},
		failures: map[string]failure{},
		existing: map[string]string{},
		pythons:  map[string]pyVersion{},
		ready:    map[string]bool{},
	}
	c.budget.Store(cfg.BudgetBytes)
	for _, d := range []string{c.envsDir, c.metaDir, c.locksDir, c.trashDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("envcache: %w", err)
		}
	}
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		c.sweep()
	}()
	return c, nil
}

// Close cancels the builds in progress, waits for them and for background
// eviction, and makes later Ensure calls fail with ErrClosed. Environments
// still held stay usable until released. Calling it twice is harmless.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	for _, fl := range c.flights {
		fl.cancel()
	}
	c.mu.Unlock()
	c.background.Wait()
	return nil
}

// Env is an environment ready to run jobs in, held until Release: a held
// environment is never evicted, by this process or any other sharing the
// directory.
type Env struct {
	// ID is the spec's ID.
	ID string
	// envspec.Spec is the normalised spec.
	Spec envspec.Spec
	// Dir is the environment's directory (the prefix, for conda).
	Dir string
	// Python is the interpreter jobs run with.
	Python string
	// Activation is what a job's process needs in its environment.
	Activation Activation
	// Existing is true for an environment the spec named rather than one
	// the cache built; Release does nothing for it.
	Existing bool
	// SizeBytes is the disk it occupies (du), as measured after its build.
	SizeBytes int64

	release func()
	once    sync.Once
}

// Release ends this use of the environment. Calling it more than once is
// harmless.
func (e *Env) Release() {
	if e.release != nil {
		e.once.Do(e.release)
	}
}

// Ensure returns the environment for spec, building it on first use, and
// holds it until the returned Env's Release.
//
// However many goroutines call Ensure for the same ID, one build runs; all
// of them wait for it, each until its own ctx ends, and each gets the
// installer's output on its progress writer from the moment it joined (the
// writer must not block for long; nil is fine). The build stops only when
// every caller waiting for it has gone. Across processes sharing Config.Dir,
// an exclusive lock per ID makes one of them build while the others wait
// and then use what it built.
//
// A build that fails returns the installer's own output in a *BuildError
// (or says why it could not start: no such interpreter, manager not
// available) and is remembered for Config.FailureTTL: calls meanwhile fail
// at once with an error wrapping the same one.
//
// A spec with Parent set, whose parent environment is ready here with the
// same manager and interpreter, is built from the parent's files where the
// manager can (venv; see Venv). A spec naming an Existing environment is
// resolved, not built: a venv path is checked, a conda name is looked up.
func (c *Cache) Ensure(ctx context.Context, spec envspec.Spec, progress io.Writer) (*Env, error) {
	n, err := spec.Normalize()
	if err != nil {
		return nil, err
	}
	if !c.cfg.AllowURLs {
		if _, err := n.Requirements(false); err != nil {
			return nil, fmt.Errorf("%w: %w", envspec.ErrBadSpec, err)
		}
	}
	m := c.cfg.Managers[n.Manager]
	if m == nil {
		return nil, fmt.Errorf("envcache: the %s manager is not configured on this worker", n.Manager)
	}
	id := n.ID()
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if n.Existing != "" {
		c.mu.Unlock()
		return c.ensureExisting(ctx, id, n, m)
	}
	if f, ok := c.failures[id]; ok {
		now := c.now()
		if now.Before(f.until) {
			c.mu.Unlock()
			return nil, fmt.Errorf("envcache: %s failed to build %s ago and is not retried for another %s: %w",
				id, now.Sub(f.at).Round(time.Second), f.until.Sub(now).Round(time.Second), f.err)
		}
		delete(c.failures, id)
	}
	if h := c.held[id]; h != nil && h.refs > 0 {
		h.refs++
		env := c.newEnv(id, n, m, h.meta)
		touch := c.now().Sub(h.meta.LastUsed) > touchInterval
		if touch {
			h.meta.LastUsed = c.now()
		}
		meta := h.meta
		c.mu.Unlock()
		if touch {
			c.writeMetaLogged(meta)
		}
		return env, nil
	}
	fl := c.flights[id]
	if fl == nil {
		// The build belongs to no one caller: it keeps ctx's values but
		// not its deadline, and stops when the last waiter leaves.
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		fl = &flight{done: make(chan struct{}), cancel: cancel, out: &fanout{}, spec: n, manager: m}
		c.flights[id] = fl
		c.background.Add(1)
		go c.fly(bctx, id, fl)
	}
	fl.waiters++
	token := fl.out.add(progress)
	c.mu.Unlock()
	if c.onJoin != nil {
		c.onJoin(id)
	}

	select {
	case <-fl.done:
	case <-ctx.Done():
		c.mu.Lock()
		if !fl.finished {
			fl.waiters--
			fl.out.remove(token)
			if fl.waiters == 0 {
				fl.cancel()
				if c.flights[id] == fl {
					delete(c.flights, id) // a later caller starts afresh
				}
			}
			c.mu.Unlock()
			return nil, fmt.Errorf("envcache: waiting for %s: %w", id, context.Cause(ctx))
		}
		c.mu.Unlock() // it finished meanwhile: take the result
	}
	if fl.err != nil {
		return nil, fl.err
	}
	return c.newEnv(id, n, m, fl.meta), nil // fly counted a reference for us
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
		fl.meta = meta
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
		c.failures[id] = failure{err: err, at: now, until: now.Add(c.cfg.FailureTTL)}
	}
	fl.err = err
	close(fl.done)
	c.mu.Unlock()

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
	if err := m.Create(ctx, dir, req, out); err != nil {
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

// interpreter resolves a spec's python ("" for DefaultPython) to an
// interpreter, once per value.
func (c *Cache) interpreter(version string) (pyVersion, error) {
	key := cmp.Or(version, c.cfg.DefaultPython)
	c.mu.Lock()
	py, ok := c.pythons[key]
	c.mu.Unlock()
	if ok {
		return py, nil
	}
	path, err := ResolvePython(key)
	if err != nil {
		return pyVersion{}, err
	}
	v, err := interpreterVersion(path)
	if err != nil {
		return pyVersion{}, err
	}
	py = pyVersion{path: path, version: v}
	c.mu.Lock()
	c.pythons[key] = py
	c.mu.Unlock()
	return py, nil
}

// available checks m.Available once; a success is remembered for the
// cache's life (a manager that goes away later fails its next build with
// its own error), a failure is checked again next time.
func (c *Cache) available(ctx context.Context, m Manager) error {
	c.mu.Lock()
	ok := c.ready[m.Name()]
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := m.Available(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.ready[m.Name()] = true
	c.mu.Unlock()
	return nil
}

// release ends one use of id.
func (c *Cache) release(id string) {
	c.mu.Lock()
	h := c.held[id]
	if h == nil || h.refs == 0 {
		c.mu.Unlock()
		return
	}
	h.refs--
	var lk *fileLock
	if h.refs == 0 {
		lk, h.lock = h.lock, nil
	}
	c.mu.Unlock()
	if lk != nil {
		lk.close()
		c.trimSoon()
	}
}

func (c *Cache) newEnv(id string, n envspec.Spec, m Manager, meta envMeta) *Env {
	dir := c.envDir(id)
	return &Env{ID: id, Spec: n, Dir: dir, Python: m.Python(dir), Activation: m.Activation(dir),
		SizeBytes: meta.SizeBytes, release: func() { c.release(id) }}
}

// envResolver is implemented by managers that can find an existing
// environment by name (Conda).
type envResolver interface {
	ResolveEnv(ctx context.Context, nameOrPrefix string) (string, error)
}

// ensureExisting resolves a spec naming an existing environment.
func (c *Cache) ensureExisting(ctx context.Context, id string, n envspec.Spec, m Manager) (*Env, error) {
	c.mu.Lock()
	dir, known := c.existing[id]
	c.mu.Unlock()
	check := func(dir string) error {
		if n.Manager == envspec.ManagerConda {
			return (&Conda{}).checkPrefix(dir)
		}
		_, err := ExistingVenv(dir)
		return err
	}
	if !known || check(dir) != nil {
		var err error
		switch r, ok := m.(envResolver); {
		case n.Manager == envspec.ManagerConda && ok:
			dir, err = r.ResolveEnv(ctx, n.Existing)
		case filepath.IsAbs(n.Existing):
			dir, err = n.Existing, check(n.Existing)
		default:
			err = fmt.Errorf("envcache: cannot resolve %q with the %s manager", n.Existing, n.Manager)
		}
		if err != nil {
			return nil, fmt.Errorf("envcache: existing environment %q: %w", n.Existing, err)
		}
		c.mu.Lock()
		c.existing[id] = dir
		c.mu.Unlock()
	}
	return &Env{ID: id, Spec: n, Dir: dir, Python: m.Python(dir), Activation: m.Activation(dir), Existing: true}, nil
}

// Held returns the IDs of the environments ready on disk, and of the
// existing environments resolved by this process, sorted: what a worker
// advertises for placement.
func (c *Cache) Held() []string {
	var ids []string
	for _, meta := range c.readAllMeta() {
		ids = append(ids, meta.ID)
	}
	c.mu.Lock()
	for id := range c.existing {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Entry describes one environment in the cache.
type Entry struct {
	ID        string       `json:"id"`
	Spec      envspec.Spec `json:"spec"`
	Dir       string       `json:"dir"`
	SizeBytes int64        `json:"size_bytes"`
	BuiltAt   time.Time    `json:"built_at"`
	LastUsed  time.Time    `json:"last_used"`
	// InUse counts this process's holders (other processes' are not
	// known).
	InUse int `json:"in_use"`
}

// Entries lists the ready environments on disk, least recently used
// first.
func (c *Cache) Entries() []Entry {
	metas := c.readAllMeta()
	out := make([]Entry, 0, len(metas))
	c.mu.Lock()
	for _, m := range metas {
		e := Entry{ID: m.ID, Spec: m.Spec, Dir: c.envDir(m.ID), SizeBytes: m.SizeBytes, BuiltAt: m.BuiltAt, LastUsed: m.LastUsed}
		if h := c.held[m.ID]; h != nil {
			e.InUse = h.refs
		}
		out = append(out, e)
	}
	c.mu.Unlock()
	return out
}

// readAllMeta reads the metadata of every ready environment, least
// recently used first.
func (c *Cache) readAllMeta() []envMeta {
	entries, err := os.ReadDir(c.metaDir)
	if err != nil {
		return nil
	}
	var out []envMeta
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !envspec.IsID(id) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.metaDir, e.Name()))
		if err != nil {
			continue // evicted meanwhile
		}
		var meta envMeta
		if json.Unmarshal(data, &meta) == nil && meta.ID == id {
			out = append(out, meta)
		}
	}
	slices.SortFunc(out, func(a, b envMeta) int { return cmp.Or(a.LastUsed.Compare(b.LastUsed), cmp.Compare(a.ID, b.ID)) })
	return out
}

// Usage returns the disk the ready environments occupy together, as
// measured after their builds.
func (c *Cache) Usage() int64 {
	var total int64
	for _, m := range c.readAllMeta() {
		total += m.SizeBytes
	}
	return total
}

// trimSoon starts a Trim in the background, unless one is running (which
// then runs once more).
func (c *Cache) trimSoon() {
	if c.budget.Load() < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.trimming {
		c.trimAgain = true
		return
	}
	c.trimming = true
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		for {
			if _, err := c.Trim(context.Background()); err != nil {
				c.log.Warn("evicting environments", "err", err)
			}
			c.mu.Lock()
			if !c.trimAgain {
				c.trimming = false
				c.mu.Unlock()
				return
			}
			c.trimAgain = false
			c.mu.Unlock()
		}
	}()
}

// Trim evicts unused environments, least recently used first, until the
// ready ones fit in Config.BudgetBytes, and returns the IDs it evicted.
// An environment held by any process, or being built, is skipped. The
// cache calls it after each build and each last release; call it to evict
// on demand.
func (c *Cache) Trim(ctx context.Context) ([]string, error) {
	budget := c.budget.Load()
	if budget < 0 {
		return nil, nil
	}
	c.trimMu.Lock()
	defer c.trimMu.Unlock()
	metas := c.readAllMeta()
	var total int64
	for _, m := range metas {
		total += m.SizeBytes
	}
	var evicted []string
	for _, m := range metas {
		if total <= budget {
			break
		}
		if err := ctx.Err(); err != nil {
			return evicted, err
		}
		ok, err := c.evict(m.ID)
		if err != nil {
			return evicted, err
		}
		if ok {
			total -= m.SizeBytes
			evicted = append(evicted, m.ID)
			c.log.Info("environment evicted", "env", m.ID, "size_bytes", m.SizeBytes, "last_used", m.LastUsed)
		}
	}
	if total > budget {
		c.log.Warn("environments in use exceed the disk budget", "usage_bytes", total, "budget_bytes", budget)
	}
	return evicted, nil
}

// evict removes id if no one uses it, reporting whether it did.
func (c *Cache) evict(id string) (bool, error) {
	busy := func() bool {
		h := c.held[id]
		return (h != nil && h.refs > 0) || c.flights[id] != nil
	}
	c.mu.Lock()
	b := busy()
	c.mu.Unlock()
	if b {
		return false, nil
	}
	lk, err := openLock(c.lockPath(id))
	if err != nil {
		return false, err
	}
	defer lk.close()
	if ok, err := lk.tryLock(true); err != nil || !ok {
		return false, err // in use by another process, or being built
	}
	c.mu.Lock()
	if busy() { // taken by this process since we looked
		c.mu.Unlock()
		return false, nil
	}
	delete(c.held, id)
	c.mu.Unlock()
	// The metadata goes first: without it the environment is not ready,
	// whatever remains of its directory.
	if err := os.Remove(c.metaPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("envcache: evict %s: %w", id, err)
	}
	trash := c.toTrash(c.envDir(id))
	if trash != c.envDir(id) {
		lk.close() // it is out of the way: no one needs to wait for the deletion
	}
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("envcache: remove %s: %w", trash, err)
	}
	return true, nil
}

// removeDir moves dir into the trash and deletes it from there.
func (c *Cache) removeDir(dir string) error {
	trash := c.toTrash(dir)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("envcache: remove %s: %w", trash, err)
	}
	return nil
}

// toTrash moves dir into the trash (a rename: at once, so dir is gone) and
// returns what to delete: the trash entry, or dir itself when it could not
// be moved, or "" when there is no dir.
func (c *Cache) toTrash(dir string) string {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	trash, err := os.MkdirTemp(c.trashDir, filepath.Base(dir)+"-")
	if err != nil {
		return dir
	}
	if err := os.Rename(dir, filepath.Join(trash, "env")); err != nil {
		os.Remove(trash)
		return dir
	}
	return trash
}

// sweep removes what interrupted builds and evictions left: the trash,
// environment directories without metadata, metadata without a directory.
// Each under its exclusive lock, taken only if free.
func (c *Cache) sweep() {
	if entries, err := os.ReadDir(c.trashDir); err == nil {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(c.trashDir, e.Name()))
		}
	}
	ids := map[string]bool{}
	if entries, err := os.ReadDir(c.envsDir); err == nil {
		for _, e := range entries {
			ids[e.Name()] = true
		}
	}
	if entries, err := os.ReadDir(c.metaDir); err == nil {
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
				ids[id] = true
			}
		}
	}
	for id := range ids {
		if !envspec.IsID(id) {
			continue
		}
		_, metaErr := os.Stat(c.metaPath(id))
		_, dirErr := os.Stat(c.envDir(id))
		if (metaErr == nil) == (dirErr == nil) {
			continue
		}
		lk, err := openLock(c.lockPath(id))
		if err != nil {
			continue
		}
		if ok, _ := lk.tryLock(true); ok {
			// Re-check under the lock: a build may have finished.
			_, metaErr = os.Stat(c.metaPath(id))
			_, dirErr = os.Stat(c.envDir(id))
			if metaErr != nil && dirErr == nil {
				c.log.Info("removing the remains of an interrupted build", "env", id)
				_ = c.removeDir(c.envDir(id))
			} else if metaErr == nil && dirErr != nil {
				_ = os.Remove(c.metaPath(id))
			}
		}
		lk.close()
	}
}

func (c *Cache) envDir(id string) string   { return filepath.Join(c.envsDir, id) }
func (c *Cache) metaPath(id string) string { return filepath.Join(c.metaDir, id+".json") }
func (c *Cache) lockPath(id string) string { return filepath.Join(c.locksDir, id+".lock") }

func (c *Cache) writeMeta(meta envMeta) error {
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(c.metaPath(meta.ID), append(data, '\n'))
}

// writeMetaLogged rewrites the metadata of an environment in use (to
// record its last use); a failure only costs LRU precision.
func (c *Cache) writeMetaLogged(meta envMeta) {
	if err := c.writeMeta(meta); err != nil {
		c.log.Warn("record environment use", "env", meta.ID, "err", err)
	}
}

// fanout copies a build's output to every waiter's progress writer. A
// writer that fails is dropped; the build goes on.
type fanout struct {
	mu   sync.Mutex
	next int
	ws   map[int]io.Writer
}

func (f *fanout) add(w io.Writer) int {
	if w == nil {
		return -1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ws == nil {
		f.ws = map[int]io.Writer{}
	}
	f.next++
	f.ws[f.next] = w
	return f.next
}

func (f *fanout) remove(token int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ws, token)
}

func (f *fanout) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for token, w := range f.ws {
		if _, err := w.Write(p); err != nil {
			delete(f.ws, token)
		}
	}
	return len(p), nil
}

// probedVersions are the versions envspec.Capabilities looks for when given none.
var probedVersions = []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14"}

// envspec.Capabilities reports what this cache can build: the configured managers
// that are available, sorted, and the full versions of the interpreters
// found for versions (nil means 3.8 to 3.14) and of DefaultPython. Pool,
// Labels and Existing are the caller's to fill in.
func (c *Cache) Capabilities(ctx context.Context, versions []string) envspec.Capabilities {
	var caps envspec.Capabilities
	for name, m := range c.cfg.Managers {
		if err := m.Available(ctx); err == nil {
			caps.Managers = append(caps.Managers, name)
		} else {
			c.log.Debug("manager not available", "manager", name, "err", err)
		}
	}
	slices.Sort(caps.Managers)
	if versions == nil {
		versions = probedVersions
	}
	for _, v := range append([]string{""}, versions...) {
		if py, err := c.interpreter(v); err == nil {
			caps.Pythons = append(caps.Pythons, py.version)
		}
	}
	slices.SortFunc(caps.Pythons, compareVersions)
	caps.Pythons = slices.Compact(caps.Pythons)
	return caps
}

// compareVersions orders dotted versions numerically.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range min(len(as), len(bs)) {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		if errX != nil || errY != nil {
			if c := cmp.Compare(as[i], bs[i]); c != 0 {
				return c
			}
			continue
		}
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(as), len(bs))
}
