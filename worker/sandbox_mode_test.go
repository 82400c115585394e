package worker

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/worker/sandbox"
)

// testSandbox is the sandbox mode of the tests that do not test the sandbox:
// the default where the sandbox works here (or in CI, which must have it),
// and an explicit SandboxOff on a developer's machine without one, since a
// worker never falls back to unconfined jobs by itself.
func testSandbox(t *testing.T) string {
	t.Helper()
	if os.Getenv("CI") == "true" {
		return ""
	}
	if _, err := sandbox.Probe(context.Background(), sandbox.Config{}); err != nil {
		t.Logf("no working sandbox here, running with --sandbox off: %v", err)
		return SandboxOff
	}
	return ""
}

// A worker whose sandbox cannot work refuses to start, in the default mode
// as in require, with a message that says how to get one (the package to
// install) or how to run without it on purpose; with SandboxOff it starts
// and says that jobs run unconfined. It once ran jobs unconfined, as root,
// whenever bubblewrap was missing.
func TestWorkerWithoutSandboxFailsClosed(t *testing.T) {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, mode := range []string{"", SandboxAuto, SandboxRequire} {
		t.Run("mode="+mode, func(t *testing.T) {
			var logs strings.Builder
			w, err := New(Config{
				ID: "nosandbox", DataDir: fx.dataDir, Sandbox: mode, SandboxLauncher: sandbox.LauncherBwrap, Bwrap: "/nonexistent/bwrap",
				Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
			}, fx.broker, fx.store)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop(ctx)
			err = w.Start(ctx)
			if err == nil {
				t.Fatalf("a worker without a working sandbox started in mode %q; logs:\n%s", mode, logs.String())
			}
			if !errors.Is(err, sandbox.ErrUnavailable) {
				t.Errorf("error does not wrap sandbox.ErrUnavailable: %v", err)
			}
			for _, want := range []string{"/nonexistent/bwrap not found", "apt-get install bubblewrap", "--sandbox off"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			members, err := fx.store.Members(ctx, w.cfg.Keys.Workers())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := members[w.ID()]; ok {
				t.Error("the refused worker announced itself")
			}
		})
	}
	t.Run("mode=off", func(t *testing.T) {
		var logs strings.Builder
		w, err := New(Config{
			ID: "sandboxoff", DataDir: fx.dataDir, Sandbox: SandboxOff, Bwrap: "/nonexistent/bwrap",
			Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		}, fx.broker, fx.store)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatalf("--sandbox off did not start: %v", err)
		}
		if err := w.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		if !strings.Contains(logs.String(), "sandbox off: jobs run unconfined") {
			t.Errorf("a worker with --sandbox off did not say so; logs:\n%s", logs.String())
		}
	})
}

// On its defaults a worker needs no bubblewrap: the built-in launcher
// builds its sandboxes. A worker without bubblewrap once refused to start
// (and before that ran its jobs unconfined).
func TestWorkerWithoutBwrapStartsSandboxed(t *testing.T) {
	if os.Getenv("CI") != "true" {
		if _, err := sandbox.Probe(context.Background(), sandbox.Config{Launcher: sandbox.LauncherBuiltin}); err != nil {
			t.Skipf("no namespaces here: %v", err)
		}
	}
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs strings.Builder
	w, err := New(Config{
		ID: "builtin", DataDir: fx.dataDir, Bwrap: "/nonexistent/bwrap",
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("a worker on its defaults, without bubblewrap, did not start: %v", err)
	}
	defer w.Stop(ctx)
	if w.box == nil || w.box.Version() != sandbox.LauncherBuiltin {
		t.Fatalf("the worker has no sandbox of the built-in launcher (%v); logs:\n%s", w.box, logs.String())
	}
}
