package runner

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
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
type Fresh struct {
	sb  *SandboxConfig
	log *slog.Logger

	mu     sync.Mutex
	ready  map[string]*freshEntry
	closed bool
	wg     sync.WaitGroup
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
}

// NewFresh returns a Fresh that starts its interpreters in sb.
func NewFresh(sb *SandboxConfig, log *slog.Logger) *Fresh {
	if log == nil {
		log = slog.Default()
	}
	return &Fresh{sb: sb, log: log, ready: map[string]*freshEntry{}}
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
			go f.discard(e)
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
	go z.Close()
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
		go f.discard(f.ready[oldest])
		delete(f.ready, oldest)
	}
	e := &freshEntry{done: make(chan struct{}), created: time.Now()}
	f.ready[key] = e
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(e.done)
		e.z, e.err = StartZygote(context.Background(), ZygoteConfig{
			Python: python, Env: env, Preload: []string{}, Sandbox: f.sb, Logger: f.log,
		})
		if e.err != nil {
			f.log.Warn("a sandboxed interpreter could not be started ahead of time", "python", python, "err", e.err)
		}
	}()
	time.AfterFunc(FreshIdle, func() {
		f.mu.Lock()
		stale := f.ready[key] == e
		if stale {
			delete(f.ready, key)
		}
		f.mu.Unlock()
		if stale {
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

// Close stops the interpreters waiting for a job.
func (f *Fresh) Close() {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	entries := f.ready
	f.ready = nil
	f.mu.Unlock()
	f.wg.Wait()
	for _, e := range entries {
		f.discard(e)
	}
}
