package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/codexec/codexec/internal/lifecycle"
)

// Fresh runs jobs that must have an interpreter of their own (spawn mode,
// or the first jobs of an environment while its zygote starts) in a
// sandbox, as RunSandboxed does, but with that interpreter started ahead
// of time: for each interpreter and environment it keeps one sandboxed
// one-shot zygote ready for the next job, so that a job does not wait for
// bubblewrap, the interpreter and the zygote's own imports (about 50 ms).
// Each one-shot serves one job and is stopped after it, so every job still
// gets an interpreter no job has used. At most MaxReady wait at once; one
// unused for FreshIdle is stopped. Safe for concurrent use.
//
// Fresh keeps the lifecycle contract (package internal/lifecycle): Start
// checks it has a sandbox, Stop stops every interpreter it started and
// waits for the goroutines that start and stop them. Run works from
// NewFresh on; after Stop it runs each job in a sandbox of its own
// (RunSandboxed).
type Fresh struct {
	sb  *SandboxConfig
	log *slog.Logger

	mu       sync.Mutex
	ready    map[string]*freshEntry
	closed   bool
	stopDone chan struct{}  // closed when the first Stop has finished
	wg       sync.WaitGroup // starts, and background stops (background)
}

// Defaults of Fresh.
const (
	FreshMaxReady = 4
	FreshIdle     = 2 * time.Minute
)

type freshEntry struct {
	done    chan struct{} // closed when the start has ended
	z       *Zygote
	err     error
	created time.Time
	idle    *time.Timer // stops it once it has waited FreshIdle
}

// NewFresh returns a Fresh that starts its interpreters in sb.
func NewFresh(sb *SandboxConfig, log *slog.Logger) *Fresh {
	if log == nil {
		log = slog.Default()
	}
	return &Fresh{sb: sb, log: log, ready: map[string]*freshEntry{}, stopDone: make(chan struct{})}
}

// Start checks that f can start interpreters: it needs a sandbox. Nothing
// is started before the first job or Prestart.
func (f *Fresh) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.closed:
		return errors.New("runner: fresh: stopped")
	case f.sb == nil || f.sb.Box == nil:
		return errors.New("runner: fresh: no sandbox to start interpreters in")
	}
	return nil
}

// background runs fn in a goroutine that Stop waits for; once f is
// stopping, it runs fn at once instead.
func (f *Fresh) background(fn func()) {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		fn()
		return
	}
	f.wg.Add(1)
	f.mu.Unlock()
	go func() {
		defer f.wg.Done()
		fn()
	}()
}

// Run runs s, which must carry a Confinement, in a one-shot zygote started
// ahead of time when there is one for its interpreter and environment (or
// is being started: it is further along than a new one), else in a new
// one; and starts the next one for the key.
func (f *Fresh) Run(ctx context.Context, s Spec) (Outcome, error) {
	if err := s.validate(); err != nil {
		return Outcome{}, err
	}
	if s.Confine == nil {
		return Outcome{}, errors.New("runner: a fresh sandboxed interpreter needs a confined job")
	}
	env := zygoteEnv(s.Env)
	key := zygoteKey(s.Python, env, nil)
	f.mu.Lock()
	e := f.ready[key]
	delete(f.ready, key)
	f.mu.Unlock()
	f.prestart(key, s.Python, env)

	var z *Zygote
	if e != nil {
		select {
		case <-e.done:
		case <-ctx.Done():
			f.background(func() { f.discard(e) })
			return Outcome{}, ctx.Err()
		}
		if e.err == nil && e.z.Err() == nil {
			z = e.z
		} else if e.z != nil {
			e.z.Close()
		}
	}
	if z == nil {
		return RunSandboxed(ctx, f.sb, s)
	}
	out, err := z.Run(ctx, s)
	// The job's processes are gone with it (the zygote swept them);
	// reaping the zygote and its namespace need not delay the result.
	f.background(func() { z.Close() })
	if errors.Is(err, ErrNotStarted) {
		return RunSandboxed(ctx, f.sb, s)
	}
	return out, err
}

// Prestart starts a one-shot zygote for s's interpreter and environment
// ahead of its first job, unless one waits already.
func (f *Fresh) Prestart(s Spec) {
	env := zygoteEnv(s.Env)
	f.prestart(zygoteKey(s.Python, env, nil), s.Python, env)
}

// prestart starts the next one-shot zygote of key in the background. When
// FreshMaxReady wait already, the oldest makes room; one that waits
// FreshIdle is stopped.
func (f *Fresh) prestart(key, python string, env []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if _, ok := f.ready[key]; ok {
		return
	}
	for len(f.ready) >= FreshMaxReady {
		oldest := ""
		for k, e := range f.ready {
			if oldest == "" || e.created.Before(f.ready[oldest].created) {
				oldest = k
			}
		}
		old := f.ready[oldest]
		old.idle.Stop()
		delete(f.ready, oldest)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.discard(old)
		}()
	}
	e := &freshEntry{done: make(chan struct{}), created: time.Now()}
	f.ready[key] = e
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(e.done)
		e.z, e.err = StartZygote(context.Background(), ZygoteConfig{
			Python: python, Env: env, Preload: []string{}, Sandbox: f.sb, Logger: f.log, OneShot: true,
		})
		if e.err != nil {
			f.log.Warn("a sandboxed interpreter could not be started ahead of time", "python", python, "err", e.err)
		}
	}()
	e.idle = time.AfterFunc(FreshIdle, func() {
		f.mu.Lock()
		stale := !f.closed && f.ready[key] == e
		if stale {
			delete(f.ready, key)
			f.wg.Add(1) // before Stop can wait: it sets closed under f.mu first
		}
		f.mu.Unlock()
		if stale {
			defer f.wg.Done()
			f.discard(e)
		}
	})
}

func (f *Fresh) discard(e *freshEntry) {
	<-e.done
	if e.z != nil {
		e.z.Close()
	}
}

// Stop stops the interpreters waiting for a job, and waits for those
// starting and for the ones being stopped in the background. Jobs still
// running are not waited for: stop feeding f first. Stop is idempotent; a
// second call waits for the first to finish (or for its ctx).
func (f *Fresh) Stop(ctx context.Context) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return lifecycle.Wait(ctx, f.stopDone)
	}
	f.closed = true
	entries := f.ready
	f.ready = nil
	f.mu.Unlock()
	defer close(f.stopDone)
	for _, e := range entries {
		e.idle.Stop()
	}
	f.wg.Wait()
	for _, e := range entries {
		f.discard(e)
	}
	return nil
}
