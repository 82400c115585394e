package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/codexec/codexec/internal/lifecycle"
	"github.com/codexec/codexec/internal/telemetry"
)

// PoolConfig configures a Pool. The zero value is usable.
type PoolConfig struct {
	// Preload is what a zygote imports when its Spec.Preload is nil. Nil
	// means DefaultPreload; an empty, non-nil slice means nothing.
	Preload []string
	// MaxZygotes caps the zygotes alive at once. When a new environment
	// needs one and the cap is reached, the least recently used idle zygote
	// is stopped; when none is idle, the job runs with spawn. Default 4.
	MaxZygotes int
	// IdleTimeout stops a zygote that has run no job for this long.
	// Default 10 minutes.
	IdleTimeout time.Duration
	// StartTimeout bounds a zygote's start, imports included. Default 2
	// minutes.
	StartTimeout time.Duration
	// Logger receives the pool's logs. Default slog.Default().
	Logger *slog.Logger
	// Sandbox, when set, starts every zygote in a sandbox, and jobs that
	// cannot use one run in a Fresh (a sandboxed interpreter of their own,
	// started ahead of time) instead of with Run.
	Sandbox *SandboxConfig
}

// WithDefaults returns c with every unset field given its default.
func (c PoolConfig) WithDefaults() PoolConfig {
	if c.Preload == nil {
		c.Preload = DefaultPreload
	}
	if c.MaxZygotes <= 0 {
		c.MaxZygotes = DefaultMaxZygotes
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultZygoteIdle
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultZygoteStartTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Pool runs jobs in zygotes, one per interpreter and environment, and falls
// back to Run (a fresh interpreter) whenever no zygote is ready: a job
// never waits for a zygote to start. It is safe for concurrent use.
//
// The zygote for a Spec is chosen by its interpreter, its environment
// without HOME (each job's child sets its own), and its preload list. The
// first job of such a key starts the zygote in the background and runs
// with spawn, as do the jobs that come while it starts. A zygote whose
// imports started threads is not used: that key runs with spawn for the
// pool's life, and the pool logs why. A zygote that dies is replaced on
// next use; one that fails to start is retried with a growing delay.
//
// A Pool keeps the lifecycle contract (package internal/lifecycle): Start
// starts the janitor that stops idle zygotes (jobs run from NewPool on,
// but no zygote is stopped for idleness before Start), and Stop stops
// every zygote and waits for every goroutine of the pool.
type Pool struct {
	cfg PoolConfig
	log *slog.Logger

	baseCtx context.Context
	cancel  context.CancelFunc
	bg      sync.WaitGroup // zygote starts, watches and background stops

	fresh *Fresh // sandboxed interpreters for the jobs no zygote runs; nil without a sandbox

	mu       sync.Mutex
	entries  map[string]*poolEntry
	started  bool
	closed   bool
	janitor  chan struct{} // closed to stop the idle janitor
	jdone    chan struct{} // closed when the janitor has returned (or never ran)
	stopDone chan struct{} // closed when the first Stop has finished
}

type entryState int

const (
	stateStarting entryState = iota
	stateReady
	stateUnsafe
	stateFailed
)

func (s entryState) String() string {
	return [...]string{"starting", "ready", "unsafe", "failed"}[s]
}

// poolEntry is the pool's record of one key's zygote.
type poolEntry struct {
	key     string
	python  string
	env     []string
	preload []string
	// trustSite: the environment's start-up code runs in the zygote
	// (Spec.TrustSite).
	trustSite bool
	state     entryState
	z         *Zygote
	err       error
	ready     chan struct{} // closed when the current start attempt ends
	failures  int           // consecutive failed starts and deaths
	retryAt   time.Time
	lastUsed  time.Time
	running   int
}

// NewPool returns a Pool with no zygote yet. It starts nothing: call
// Start, and Stop when done.
func NewPool(cfg PoolConfig) *Pool {
	cfg = cfg.WithDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		cfg: cfg, log: cfg.Logger, baseCtx: ctx, cancel: cancel,
		entries: make(map[string]*poolEntry),
		janitor: make(chan struct{}), jdone: make(chan struct{}), stopDone: make(chan struct{}),
	}
	if cfg.Sandbox != nil {
		p.fresh = NewFresh(cfg.Sandbox, cfg.Logger)
	}
	return p
}

// Start starts the janitor that stops idle zygotes (and checks the
// sandbox of the fresh interpreters, with a SandboxConfig). Zygotes
// themselves start with the first job, or Warm, of their environment.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return errors.New("runner: pool stopped")
	case p.started:
		return errors.New("runner: pool already started")
	}
	if p.fresh != nil {
		if err := p.fresh.Start(ctx); err != nil {
			return err
		}
	}
	p.started = true
	go p.janitorLoop()
	return nil
}

// background runs fn in a goroutine that Stop waits for. Called with p.mu
// held, before Stop has begun (p.closed false).
func (p *Pool) background(fn func()) {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		fn()
	}()
}

// Run runs s in its zygote when that is ready, else in a fresh interpreter:
// sandboxed (Fresh) when the pool has a sandbox, else spawned (the
// package-level Run). Its results mean what Run's do; an error wrapping ErrZygoteDied says
// the job was lost with its zygote.
func (p *Pool) Run(ctx context.Context, s Spec) (Outcome, error) {
	if e := p.acquire(s); e != nil {
		out, err := e.z.Run(ctx, s)
		p.release(e, err)
		if !errors.Is(err, ErrNotStarted) {
			return out, err
		}
		p.log.Warn("job not started by its zygote; running it in a fresh interpreter", "python", s.Python, "err", err)
	}
	if p.fresh != nil {
		return p.fresh.Run(ctx, s)
	}
	return Run(ctx, s)
}

// RunSandboxed runs s, which must carry a Confinement, in a sandbox of its
// own: a zygote that imports nothing, started for this job and stopped
// after it. It is the sandbox's spawn: it costs an interpreter start, as
// Run does, plus the sandbox's. s.Timeout counts from the job's start, not
// the zygote's.
func RunSandboxed(ctx context.Context, sb *SandboxConfig, s Spec) (Outcome, error) {
	if err := s.validate(); err != nil {
		return Outcome{}, err
	}
	if s.Confine == nil {
		return Outcome{}, errors.New("runner: RunSandboxed needs a confined job")
	}
	z, err := StartZygote(ctx, ZygoteConfig{
		Python: s.Python, Env: zygoteEnv(s.Env), Preload: []string{}, Sandbox: sb,
		Logger: slog.Default().With("python", s.Python),
	})
	if err != nil {
		return Outcome{}, fmt.Errorf("runner: sandbox: %w", err)
	}
	defer z.Close()
	return z.Run(ctx, s)
}

// Warm starts the zygote for s unless it runs or starts already, and waits
// until it is ready or has failed (then it returns why), or ctx ends.
func (p *Pool) Warm(ctx context.Context, s Spec) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("runner: pool closed")
	}
	e := p.entry(s)
	if e == nil {
		p.mu.Unlock()
		return fmt.Errorf("runner: no room for another zygote (%d, all busy)", p.cfg.MaxZygotes)
	}
	if e.state == stateReady && e.z.Err() != nil {
		p.diedLocked(e, e.z)
	}
	if e.state == stateFailed && !time.Now().Before(e.retryAt) {
		p.startLocked(e)
	}
	ready, starting := e.ready, e.state == stateStarting
	p.mu.Unlock()
	if p.fresh != nil && starting {
		// The jobs that come while the zygote starts run in fresh
		// sandboxed interpreters: have the first one ready too.
		p.fresh.Prestart(s)
	}
	select {
	case <-ready:
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return e.err
}

// acquire returns the ready entry for s with a job counted on it, or nil
// when s must run with spawn (and then starts a zygote for it if needed).
func (p *Pool) acquire(s Spec) *poolEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	e := p.entry(s)
	if e == nil {
		return nil
	}
	switch e.state {
	case stateReady:
		if e.z.Err() != nil {
			p.diedLocked(e, e.z)
			return nil
		}
		e.running++
		e.lastUsed = time.Now()
		return e
	case stateFailed:
		if !time.Now().Before(e.retryAt) {
			p.startLocked(e)
		}
	}
	return nil
}

func (p *Pool) release(e *poolEntry, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.running--
	e.lastUsed = time.Now()
	if err == nil && e.state == stateReady {
		e.failures = 0
	}
}

// entry returns the entry for s, creating it (and starting its zygote)
// when there is none and the cap allows. Called with p.mu held.
func (p *Pool) entry(s Spec) *poolEntry {
	preload := s.Preload
	if preload == nil {
		preload = p.cfg.Preload
	}
	env := zygoteEnv(s.Env)
	key := zygoteKey(s.Python, env, preload)
	if s.TrustSite {
		key += "+site"
	}
	if e := p.entries[key]; e != nil {
		return e
	}
	if !p.makeRoomLocked() {
		return nil
	}
	e := &poolEntry{key: key, python: s.Python, env: env, preload: slices.Clone(preload), trustSite: s.TrustSite, lastUsed: time.Now()}
	p.entries[key] = e
	p.startLocked(e)
	return e
}

// makeRoomLocked makes sure one more zygote may start, stopping the least
// recently used idle one if needed. It reports false when every zygote is
// busy. Records of failed and unsafe keys are kept, a bounded number.
func (p *Pool) makeRoomLocked() bool {
	var live []*poolEntry
	var dead []*poolEntry
	for _, e := range p.entries {
		switch e.state {
		case stateStarting, stateReady:
			live = append(live, e)
		default:
			dead = append(dead, e)
		}
	}
	if len(dead) >= 4*p.cfg.MaxZygotes {
		slices.SortFunc(dead, func(a, b *poolEntry) int { return a.lastUsed.Compare(b.lastUsed) })
		for _, e := range dead[:len(dead)/2] {
			delete(p.entries, e.key)
		}
	}
	if len(live) < p.cfg.MaxZygotes {
		return true
	}
	var lru *poolEntry
	for _, e := range live {
		if e.state == stateReady && e.running == 0 && (lru == nil || e.lastUsed.Before(lru.lastUsed)) {
			lru = e
		}
	}
	if lru == nil {
		return false
	}
	p.log.Info("stopping the least recently used zygote to make room", "python", lru.python, "pid", lru.z.Info().PID)
	p.stopLocked(lru)
	return true
}

// startLocked starts e's zygote in the background.
func (p *Pool) startLocked(e *poolEntry) {
	e.state = stateStarting
	e.err = nil
	e.z = nil
	e.ready = make(chan struct{})
	ready := e.ready
	p.background(func() {
		began := time.Now()
		z, err := StartZygote(p.baseCtx, ZygoteConfig{
			Python: e.python, Env: e.env, Preload: e.preload, TrustSite: e.trustSite,
			StartTimeout: p.cfg.StartTimeout, Logger: p.log, Sandbox: p.cfg.Sandbox,
		})
		p.mu.Lock()
		defer p.mu.Unlock()
		defer close(ready)
		if p.closed || p.entries[e.key] != e {
			// The pool closed, or evicted e, while it started.
			if z != nil {
				z.Close()
			}
			e.state, e.err = stateFailed, errors.New("runner: zygote no longer wanted")
			return
		}
		switch {
		case errors.Is(err, ErrZygoteUnsafe):
			e.state, e.err = stateUnsafe, err
			p.log.Warn("zygote unsafe to fork: its imports started threads; jobs of this environment run with spawn",
				"python", e.python, "err", err)
		case err != nil:
			telemetry.ZygoteFailed()
			e.failures++
			e.state, e.err = stateFailed, err
			e.retryAt = time.Now().Add(retryDelay(e.failures))
			p.log.Warn("zygote failed to start; jobs run with spawn", "python", e.python, "err", err,
				"retry_in", retryDelay(e.failures))
		default:
			e.state, e.z, e.lastUsed = stateReady, z, time.Now()
			telemetry.ZygoteStarted()
			info := z.Info()
			attrs := []any{"python", e.python, "pid", info.PID, "version", info.Version,
				"preloaded", len(info.Preloaded), "import_ms", info.ImportTime.Milliseconds(),
				"start_ms", time.Since(began).Milliseconds(), "rss_bytes", z.RSS(), "keeper", info.Keeper}
			if len(info.Failed) > 0 {
				attrs = append(attrs, "failed", info.Failed)
			}
			p.log.Info("zygote ready", attrs...)
			p.background(func() { p.watch(e, z) })
		}
	})
}

// watch notices a zygote's death and makes its entry start a new one on
// next use.
func (p *Pool) watch(e *poolEntry, z *Zygote) {
	<-z.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.diedLocked(e, z)
}

func (p *Pool) diedLocked(e *poolEntry, z *Zygote) {
	if p.closed || e.z != z || e.state != stateReady || p.entries[e.key] != e {
		return // stopped on purpose, or already handled
	}
	telemetry.ZygoteReplaced()
	e.failures++
	e.state, e.err, e.z = stateFailed, z.Err(), nil
	e.retryAt = time.Now().Add(retryDelay(e.failures))
	p.log.Warn("zygote died; it is replaced on next use", "python", e.python, "pid", z.Info().PID, "err", z.Err())
	p.background(func() { z.Close() })
}

// retryDelay is how long after its n-th consecutive failure a zygote is
// started again: at once after the first, then 1s, 2s, 4s... up to 10
// minutes.
func retryDelay(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return min(time.Second<<min(n-2, 20), 10*time.Minute)
}

// stopLocked removes e and stops its zygote. Callers make sure no job runs
// in it (Close would kill it), and that Stop has not begun.
func (p *Pool) stopLocked(e *poolEntry) {
	delete(p.entries, e.key)
	if z := e.z; z != nil {
		e.z = nil
		p.background(func() { z.Close() })
	}
}

func (p *Pool) janitorLoop() {
	defer close(p.jdone)
	period := min(max(p.cfg.IdleTimeout/4, 10*time.Millisecond), time.Minute)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-p.janitor:
			return
		case <-t.C:
			p.stopIdle()
		}
	}
}

func (p *Pool) stopIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	for _, e := range p.entries {
		if e.state == stateReady && e.running == 0 && time.Since(e.lastUsed) >= p.cfg.IdleTimeout {
			p.log.Info("stopping idle zygote", "python", e.python, "pid", e.z.Info().PID,
				"idle", time.Since(e.lastUsed).Round(time.Second))
			p.stopLocked(e)
		}
	}
}

// Stop stops every zygote, cancels the ones starting, and waits for every
// goroutine of the pool (and for its fresh interpreters' Stop). Jobs still
// running in a zygote are killed: stop feeding the pool first. Stop is
// idempotent; a second call waits for the first to finish (or for its ctx).
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return lifecycle.Wait(ctx, p.stopDone)
	}
	defer close(p.stopDone)
	p.closed = true
	p.cancel()
	close(p.janitor)
	if !p.started {
		close(p.jdone)
	}
	var zs []*Zygote
	for _, e := range p.entries {
		if e.z != nil {
			zs = append(zs, e.z)
		}
	}
	p.mu.Unlock()
	<-p.jdone
	for _, z := range zs {
		z.Close()
	}
	// The starts end once their zygote is up or their start cancelled,
	// the watches once their zygote is gone.
	p.bg.Wait()
	var err error
	if p.fresh != nil {
		err = p.fresh.Stop(ctx)
	}
	return err
}

// zygoteStats describes one of a pool's zygotes.
type zygoteStats struct {
	// Python is the interpreter.
	Python string
	// State is "starting", "ready", "unsafe" or "failed".
	State string
	// PID is the zygote's process id, 0 unless ready.
	PID int
	// RSSBytes is its resident set size, 0 unless ready.
	RSSBytes int64
	// Running counts the jobs running in it; Jobs those it has run.
	Running int
	Jobs    uint64
	// Preloaded lists the modules it imported; Err says why it is not
	// ready, when it is not.
	Preloaded []string
	Err       string
}

// stats describes the pool's zygotes, sorted by interpreter.
func (p *Pool) stats() []zygoteStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]zygoteStats, 0, len(p.entries))
	for _, e := range p.entries {
		st := zygoteStats{Python: e.python, State: e.state.String(), Running: e.running}
		if e.z != nil {
			info := e.z.Info()
			st.PID, st.RSSBytes, st.Jobs, st.Preloaded = info.PID, e.z.RSS(), e.z.Jobs(), info.Preloaded
		}
		if e.err != nil {
			st.Err = e.err.Error()
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b zygoteStats) int { return strings.Compare(a.Python, b.Python) })
	return out
}

// zygoteEnv is a job environment without what differs from job to job:
// HOME and codexec's own CODEXEC_ variables (a job's display directory, a
// batch row's parameters and output folder). Each child sets its whole
// environment from its request, so they reach the job all the same; kept
// here, they would make every job's zygote key different, and every job
// would start a zygote of its own and run cold while it starts. The rest
// is the environment a zygote is started with.
func zygoteEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "CODEXEC_") {
			out = append(out, kv)
		}
	}
	return out
}

func zygoteKey(python string, env, preload []string) string {
	h := sha256.New()
	for _, part := range [][]string{{python}, env, preload} {
		for _, s := range part {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		h.Write([]byte{1})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
