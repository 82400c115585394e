package worker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/wire"
)

// procsWith returns the pids of the processes whose command line holds
// marker, whatever PID namespace they run in.
func procsWith(t *testing.T, marker string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitProcs waits until the processes holding marker are there (want) or
// gone (!want), failing the test when ctx ends first.
func waitProcs(ctx context.Context, t *testing.T, marker string, want bool) {
	t.Helper()
	for (len(procsWith(t, marker)) > 0) != want {
		select {
		case <-ctx.Done():
			t.Fatalf("processes holding %s: %v, want present=%v", marker, procsWith(t, marker), want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startCancelWorker starts a worker in mode on a fresh fixture.
func startCancelWorker(ctx context.Context, t *testing.T, mode string) *lifecycleFixture {
	t.Helper()
	fx := newLifecycleFixture(t)
	w, err := New(Config{
		ID: "cancel-" + mode, DataDir: fx.dataDir, ExecMode: mode, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return fx
}

// A job cancelled while it runs is stopped with every process it started
// (here a child that would sleep for ten minutes), and its result says
// cancelled, with what it printed until then.
func TestCancelStopsRunningJob(t *testing.T) {
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			fx := startCancelWorker(ctx, t, mode)
			marker := "codexec-cancel-" + ulid.Make().String()
			// 'started' is printed before the marked child exists: the
			// test cancels as soon as it sees the child.
			code := fmt.Sprintf("import subprocess, sys, time\n"+
				"print('started', flush=True)\n"+
				"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', %q])\n"+
				"time.sleep(600)\n", marker)
			job := &wire.Job{
				ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "cancel-scope",
				Code: code, Filename: "main.py", TimeoutMS: 110000, Deadline: time.Now().Add(time.Minute).UTC(),
			}
			if err := fx.broker.PublishJob(ctx, job); err != nil {
				t.Fatal(err)
			}
			waitProcs(ctx, t, marker, true)
			if err := fx.broker.CancelJob(ctx, job.ID); err != nil {
				t.Fatal(err)
			}
			res, err := fx.broker.WaitResult(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != wire.StatusCancelled || res.Stdout != "started\n" {
				t.Errorf("result %+v, want cancelled with the output so far", res)
			}
			waitProcs(ctx, t, marker, false)
		})
	}
}

// A job cancelled while it waits in the queue never runs: its result says
// cancelled, and it printed nothing.
func TestCancelledJobNeverRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "cancel-scope",
		Code: "print('ran')", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := fx.broker.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	// The worker starts only now: the job has waited in the queue.
	w, err := New(Config{
		ID: "cancel-queued", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusCancelled || res.Stdout != "" {
		t.Errorf("result %+v, want cancelled without running", res)
	}
}

// A cancelled job's attempt is confirmed like any other before its files
// are saved: the confirmation ran under the job's own context, which the
// cancel had ended, so it failed at once ("confirm claim failed" logged for
// every cancelled job) and the files were saved unconfirmed, even by an
// attempt another worker had taken over.
func TestCancelledJobsClaimConfirmed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	logs := &lockedBuffer{}
	w, err := New(Config{
		ID: "cancel-confirm", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	marker := "codexec-cancel-confirm-" + ulid.Make().String()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "cancel-confirm",
		Code:     fmt.Sprintf("import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', %q])\ntime.sleep(600)\n", marker),
		Filename: "main.py", TimeoutMS: 110000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitProcs(ctx, t, marker, true)
	if err := fx.broker.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusCancelled {
		t.Errorf("result %s %q, want cancelled", res.Status, res.Message)
	}
	waitProcs(ctx, t, marker, false)
	if strings.Contains(logs.String(), "confirm claim failed") {
		t.Errorf("the cancelled job's claim was not confirmed:\n%s", logs.String())
	}
}
