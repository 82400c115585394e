//go:build linux

package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/codexec/codexec/internal/lifecycle"
	"github.com/codexec/codexec/internal/lifecycle/lifecycletest"
)

// warmedPool is a Pool whose Start also has it start a zygote, so that
// Stop has a process and its goroutines to end; with fail, Start then
// warms an interpreter that cannot start and returns that error, the
// zygote already running.
type warmedPool struct {
	*Pool
	good, bad Spec
	fail      bool
}

func (w *warmedPool) Start(ctx context.Context) error {
	if err := w.Pool.Start(ctx); err != nil {
		return err
	}
	if err := w.Warm(ctx, w.good); err != nil {
		return err
	}
	if w.fail {
		if err := w.Warm(ctx, w.bad); err != nil {
			return err
		}
		return errors.New("an interpreter that cannot start was warmed")
	}
	return nil
}

// Not parallel: lifecycletest.Check compares the process's goroutines and
// children before and after.
func TestPoolLifecycle(t *testing.T) {
	b := setup(t)
	good := b.spec(t, "print(1)\n")
	bad := good
	bad.Python = filepath.Join(t.TempDir(), "no-such-python")
	lifecycletest.Check(t, func(t *testing.T, fail bool) lifecycle.Service {
		return &warmedPool{Pool: NewPool(PoolConfig{Preload: testPreload}), good: good, bad: bad, fail: fail}
	}, lifecycletest.Options{IgnoreGoroutines: sharedZygoteGoroutines})
}

// startedFresh is a Fresh whose Start also has it start an interpreter
// ahead of time, which Stop must end whether it is up yet or not.
type startedFresh struct {
	*Fresh
	spec Spec
}

func (f *startedFresh) Start(ctx context.Context) error {
	if err := f.Fresh.Start(ctx); err != nil {
		return err
	}
	f.Prestart(f.spec)
	return nil
}

func TestFreshLifecycle(t *testing.T) {
	l := newSandboxLayout(t)
	s := l.spec(t, "a", testUIDA, "print(1)\n")
	lifecycletest.Check(t, func(t *testing.T, fail bool) lifecycle.Service {
		if fail {
			// No sandbox: Start refuses.
			return &startedFresh{Fresh: NewFresh(nil, nil), spec: s}
		}
		return &startedFresh{Fresh: NewFresh(l.cfg, nil), spec: s}
	}, lifecycletest.Options{IgnoreGoroutines: sharedZygoteGoroutines})
	// A stopped Fresh still runs a job, in a sandbox of its own, and
	// leaves no interpreter waiting.
	f := NewFresh(l.cfg, nil)
	if err := f.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := f.Run(context.Background(), s)
	if err != nil || string(out.Stdout) != "1\n" {
		t.Fatalf("Run after Stop: %v, %q %q", err, out.Stdout, out.Stderr)
	}
	if len(f.ready) != 0 {
		t.Errorf("%d interpreters wait after Stop", len(f.ready))
	}
	if _, err := os.Stat(l.sessions); err != nil {
		t.Fatal(err)
	}
}

// sharedZygoteGoroutines are the goroutines of the zygote the other tests
// of the package share (sharedZygote), alive for the whole test binary.
var sharedZygoteGoroutines = []string{
	"github.com/codexec/codexec/worker/runner.(*Zygote).readLoop",
	"github.com/codexec/codexec/worker/runner.StartZygote.func1",
}
