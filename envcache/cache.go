package envcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codexec/codexec/envspec"
)

// touchInterval is how stale an environment's recorded last use may get
// before a use rewrites it: often enough for LRU, rarely enough that jobs
// do not each write a file.
const touchInterval = time.Minute

// ErrClosed is returned by Ensure, and by Start, after Stop (or Close).
var ErrClosed = errors.New("envcache: cache closed")

// errNotStarted is returned by Ensure before Start.
var errNotStarted = errors.New("envcache: cache not started")

// Cache is a worker's on-disk cache of environments, each built once per
// spec (per ID) however many goroutines and processes ask for it at once,
// kept within a disk budget by least-recently-used eviction of the ones not
// in use. See the package documentation for the layout and the locking.
// Its methods are safe for concurrent use. It keeps the lifecycle
// contract (package internal/lifecycle): New, Start, Stop.
type Cache struct {
	cfg                                  Config
	log                                  *slog.Logger
	envsDir, metaDir, locksDir, trashDir string
	now                                  func() time.Time // tests replace it
	onJoin                               func(id string)  // tests: called when a caller has joined a flight
	budget                               atomic.Int64     // Config.BudgetBytes; tests change it

	// life is cancelled when a Stop gives up waiting: it ends background
	// eviction.
	life    context.Context
	endLife context.CancelFunc
	stopped chan struct{} // closed when the first Stop has returned

	mu         sync.Mutex
	started    bool
	closed     bool                         // Stop has begun: no new work
	flights    map[string]*flight           // builds (or first takes) in progress
	held       map[string]*holder           // ready environments this process knows
	failures   map[string]failure           // remembered build failures
	existing   map[string]string            // id → resolved dir of existing environments
	pythons    map[string]pyVersion         // DefaultPython or version → interpreter
	markerEnvs map[string]envspec.MarkerEnv // interpreter path → its marker variables
	ready      map[string]bool              // managers found available
	trimming   bool
	trimAgain  bool
	pruning    bool      // PruneInstallerCaches runs in the background
	lastPrune  time.Time // when pruneSoon last started one
	background sync.WaitGroup

	trimMu sync.Mutex // one Trim at a time
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

// New checks cfg and returns the cache, not started: Start opens it.
func New(cfg Config) (*Cache, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("envcache: %w", err)
	}
	c := &Cache{
		cfg:        cfg,
		log:        cfg.Logger,
		envsDir:    filepath.Join(cfg.Dir, "envs"),
		metaDir:    filepath.Join(cfg.Dir, "meta"),
		locksDir:   filepath.Join(cfg.Dir, "locks"),
		trashDir:   filepath.Join(cfg.Dir, "trash"),
		now:        time.Now,
		flights:    map[string]*flight{},
		held:       map[string]*holder{},
		failures:   map[string]failure{},
		existing:   map[string]string{},
		pythons:    map[string]pyVersion{},
		markerEnvs: map[string]envspec.MarkerEnv{},
		ready:      map[string]bool{},
		stopped:    make(chan struct{}),
	}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.budget.Store(cfg.BudgetBytes)
	return c, nil
}

// Start creates the cache's directories and starts a background sweep
// that removes the remains of interrupted builds and evictions; Stop
// waits for it. Ensure works once Start has returned nil.
func (c *Cache) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.started:
		return errors.New("envcache: cache already started")
	}
	for _, d := range []string{c.envsDir, c.metaDir, c.locksDir, c.trashDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("envcache: %w", err)
		}
	}
	c.started = true
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		c.sweep()
	}()
	return nil
}

// Stop makes later Ensure calls fail with ErrClosed, lets the builds in
// progress and background eviction finish until ctx ends, then cancels
// them, and returns once they are over. Environments still held stay
// usable until released. Stop is idempotent, safe before Start and
// concurrently with itself: later calls wait for the first.
func (c *Cache) Stop(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.stopped
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	defer close(c.stopped)
	defer c.endLife()
	idle := make(chan struct{})
	go func() {
		c.background.Wait()
		close(idle)
	}()
	select {
	case <-idle:
	case <-ctx.Done():
		c.mu.Lock()
		for _, fl := range c.flights {
			fl.cancel()
		}
		c.mu.Unlock()
		c.endLife()
		<-idle
	}
	return nil
}

// Close is Stop without waiting: it cancels the builds in progress at
// once, and returns when they and background eviction are over.
func (c *Cache) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return c.Stop(ctx)
}

// Env is an environment ready to run jobs in, held until Release: a held
// environment is never evicted, by this process or any other sharing the
// directory.
type Env struct {
	// ID is the spec's ID.
	ID string
	// Spec is the normalised spec.
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
	// Built is true when this process built the environment for this
	// call (or for a call it joined): false when it was ready on disk
	// already, built earlier by this process, by another sharing
	// Config.Dir or before a restart, and for an Existing one.
	Built bool

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
	n, id, err := spec.Identity()
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
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if !c.started {
		c.mu.Unlock()
		return nil, errNotStarted
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
	env := c.newEnv(id, n, m, fl.meta) // fly counted a reference for us
	env.Built = fl.built
	return env, nil
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

// entry describes one environment in the cache.
type entry struct {
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

// entries lists the ready environments on disk, least recently used
// first.
func (c *Cache) entries() []entry {
	metas := c.readAllMeta()
	out := make([]entry, 0, len(metas))
	c.mu.Lock()
	for _, m := range metas {
		e := entry{ID: m.ID, Spec: m.Spec, Dir: c.envDir(m.ID), SizeBytes: m.SizeBytes, BuiltAt: m.BuiltAt, LastUsed: m.LastUsed}
		if h := c.held[m.ID]; h != nil {
			e.InUse = h.refs
		}
		out = append(out, e)
	}
	c.mu.Unlock()
	return out
}
