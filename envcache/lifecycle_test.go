package envcache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/internal/lifecycle"
	"github.com/codexec/codexec/internal/lifecycle/lifecycletest"
)

// Not parallel: Check compares the process's goroutines before and after.
func TestCacheLifecycle(t *testing.T) {
	lifecycletest.Check(t, func(t *testing.T, fail bool) lifecycle.Service {
		dir := t.TempDir()
		if fail {
			// envs/ can be made, meta/ cannot: a file stands in its place.
			if err := os.WriteFile(filepath.Join(dir, "meta"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		c, err := New(Config{Dir: dir, Managers: fakeManagers(&fakeManager{})})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}, lifecycletest.Options{})
}

func TestCacheStartAndStopOrder(t *testing.T) {
	t.Parallel()
	spec := envspec.Spec{Manager: "venv"}
	c, err := New(Config{Dir: t.TempDir(), Managers: fakeManagers(&fakeManager{})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ensure(context.Background(), spec, nil); !errors.Is(err, errNotStarted) {
		t.Errorf("Ensure before Start: %v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Start after Stop: %v", err)
	}
	if _, err := c.Ensure(context.Background(), spec, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Ensure after Stop: %v", err)
	}
}

// Stop lets a build in progress finish while its ctx lasts; Close (Stop
// with an ended ctx) cancels it.
func TestCacheStopLetsBuildsFinish(t *testing.T) {
	t.Parallel()
	for _, hard := range []bool{false, true} {
		f := &fakeManager{gate: make(chan struct{}), started: make(chan string, 1)}
		c, _ := setupCache(t, Config{Managers: fakeManagers(f)})
		got := make(chan error, 1)
		go func() {
			env, err := c.Ensure(context.Background(), envspec.Spec{Manager: "venv", Packages: []string{"a"}}, nil)
			if err == nil {
				env.Release()
			}
			got <- err
		}()
		<-f.started
		stopped := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithCancel(context.Background())
			if hard {
				cancel()
			}
			defer cancel()
			stopped <- c.Stop(ctx)
		}()
		// Stop has begun once new work is refused. The probe names an
		// existing environment that is not there: refused at once before
		// Stop, ErrClosed after, and it never starts a build (one would
		// wait on the gate, and a soft Stop on it: a deadlock).
		probe := envspec.Spec{Manager: "venv", Existing: filepath.Join(t.TempDir(), "absent")}
		for {
			if _, err := c.Ensure(context.Background(), probe, nil); errors.Is(err, ErrClosed) {
				break
			}
		}
		if !hard {
			close(f.gate)
		}
		err := <-got
		if hard != (err != nil) {
			t.Errorf("stop (hard %v): the build in progress returned %v", hard, err)
		}
		if err := <-stopped; err != nil {
			t.Errorf("Stop: %v", err)
		}
	}
}
