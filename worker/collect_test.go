package worker

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/diskfs"
)

func init() { collectPoll = 100 * time.Millisecond }

// startGCWorker starts a worker on dataDir, with session file systems
// where this machine has them.
func startGCWorker(t *testing.T, fx *lifecycleFixture, dataDir string) *Worker {
	t.Helper()
	w, err := New(Config{
		ID: "gc", DataDir: dataDir, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		ExecMode: ExecSpawn, Concurrency: 2, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// runGCJob runs code in scope and fails the test unless it succeeds.
func runGCJob(t *testing.T, fx *lifecycleFixture, scope, code string) *wire.Result {
	t.Helper()
	res := runDiskJob(t, fx, scope, code, 0)
	if res.Status != wire.StatusOK {
		t.Fatalf("job in %s: %s: %s %s", scope, res.Status, res.Message, res.Stderr)
	}
	return res
}

// collectScope leaves, as the collector does (frontend/gc.go), the notice
// that scope was collected at at, naming its last snapshot.
func collectScope(t *testing.T, fx *lifecycleFixture, scope string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	keys := statestore.Keys{Prefix: statestore.DefaultPrefix}
	n := wire.CollectedWorkspace{V: wire.Version, At: at.UTC()}
	if data, err := fx.store.Get(ctx, keys.Workspace(scope)); err == nil {
		var rec wire.Workspace
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatal(err)
		}
		n.Snapshot = rec.Snapshot
	}
	data, _ := json.Marshal(n)
	if err := fx.store.HSet(ctx, keys.Collected(), scope, data); err != nil {
		t.Fatal(err)
	}
	if err := fx.store.Set(ctx, keys.CollectedSeq(), []byte(ulid.Make().String()), 0); err != nil {
		t.Fatal(err)
	}
}

// scopePaths are what w keeps of scope: its working directory, scripts
// directory, local workspace record and, with session file systems, its
// disk image.
func scopePaths(w *Worker, scope string) []string {
	p := []string{
		filepath.Join(w.sessionsRoot(), scope), filepath.Join(w.cfg.ScriptsDir, scope),
		filepath.Join(w.cfg.DataDir, "workspaces", scope+".json"),
	}
	if w.sessionFS != nil {
		p = append(p, filepath.Join(w.cfg.DataDir, "disks", scope+".img"))
	}
	return p
}

func mustExist(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// waitGone waits until none of paths exists.
func waitGone(t *testing.T, paths ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, p := range paths {
		for {
			_, err := os.Lstat(p)
			if errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s still there: %v", p, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// waitExists waits until path exists.
func waitExists(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Lstat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never appeared", path)
		}
	}
}

// snapshotOf is the object name of scope's recorded snapshot.
func snapshotOf(t *testing.T, fx *lifecycleFixture, scope string) string {
	t.Helper()
	data, err := fx.store.Get(context.Background(), statestore.Keys{Prefix: statestore.DefaultPrefix}.Workspace(scope))
	if err != nil {
		t.Fatalf("workspace record of %s: %v", scope, err)
	}
	var rec wire.Workspace
	if err := json.Unmarshal(data, &rec); err != nil || !rec.Stored {
		t.Fatalf("workspace record of %s: %s, %v", scope, data, err)
	}
	return snapshotName(scope, rec.Snapshot)
}

// A collected workspace leaves the worker: its file system unmounted and
// its image removed, its working and scripts directories, its local record
// and its snapshot in the object store, while another workspace keeps
// everything; its next job starts in an empty directory.
func TestCollectedWorkspaceLeavesTheWorker(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startGCWorker(t, fx, t.TempDir())
	if diskfs.Check() == nil && w.sessionFS == nil {
		t.Fatal("the worker has no session file systems where diskfs works")
	}
	write := "open('big', 'wb').write(b'x' * (1 << 20))"
	runGCJob(t, fx, "gc-gone", write)
	runGCJob(t, fx, "gc-kept", write)
	gone, kept := scopePaths(w, "gc-gone"), scopePaths(w, "gc-kept")
	mustExist(t, gone...)
	mustExist(t, kept...)
	snap := snapshotOf(t, fx, "gc-gone")
	ctx := context.Background()
	r, err := fx.broker.GetWorkspace(ctx, snap)
	if err != nil {
		t.Fatalf("the snapshot before the collection: %v", err)
	}
	r.Close()
	if w.sessionFS != nil {
		if mp, _ := diskfs.IsMountPoint(gone[0]); !mp {
			t.Fatal("the session's file system is not mounted before the collection")
		}
	}

	collectScope(t, fx, "gc-gone", time.Now())
	waitGone(t, gone...)
	mustExist(t, kept...)
	if mounts, err := diskfs.MountsUnder(w.sessionsRoot()); err != nil || strings.Contains(strings.Join(mounts, " "), "gc-gone") {
		t.Errorf("mounts after the collection: %v %v", mounts, err)
	}
	// The snapshot is deleted after the files (removeScope): wait for it.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r, err := fx.broker.GetWorkspace(ctx, snap)
		if errors.Is(err, broker.ErrWorkspaceNotFound) {
			break
		}
		if err == nil {
			r.Close()
		}
		if time.Now().After(deadline) {
			t.Errorf("the collected workspace's snapshot: %v, want not found", err)
			break
		}
	}
	res := runGCJob(t, fx, "gc-gone", "import os\nprint(os.path.exists('big'))")
	if strings.TrimSpace(res.Stdout) != "False" {
		t.Errorf("a job after the collection found the collected files: %q", res.Stdout)
	}
}

// A workspace collected while a job of it runs keeps its files on that
// worker: the job reads what it wrote, and the directory stays, used
// after the collection. A later collection removes it.
func TestCollectionLeavesARunningJobsWorkspace(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startGCWorker(t, fx, t.TempDir())
	runGCJob(t, fx, "gc-busy", "print('warm')")
	cwd := filepath.Join(w.sessionsRoot(), "gc-busy")
	if w.sessionFS != nil {
		cwd = filepath.Join(cwd, diskfs.Work)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "gc-busy", Filename: "main.py",
		TimeoutMS: 60000, Deadline: time.Now().Add(time.Minute).UTC(),
		Code: "import os, time\nopen('mine', 'w').write('mine')\n" +
			"while not os.path.exists('go'):\n    time.sleep(0.02)\nprint(open('mine').read())",
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitExists(t, filepath.Join(cwd, "mine"))
	collectScope(t, fx, "gc-busy", time.Now())
	waitExists(t, filepath.Join(w.collectedDir(), "gc-busy")) // the notice was read
	if err := os.WriteFile(filepath.Join(cwd, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusOK || strings.TrimSpace(res.Stdout) != "mine" {
		t.Fatalf("the running job: %s %q %s", res.Status, res.Stdout, res.Stderr)
	}
	mustExist(t, scopePaths(w, "gc-busy")...)

	collectScope(t, fx, "gc-busy", time.Now())
	waitGone(t, scopePaths(w, "gc-busy")...)
}

// A worker that was down during a collection removes the workspace when
// it starts again, before it takes a job; a later restart leaves alone
// the copy the workspace made after its collection (it does not apply the
// notice twice).
func TestCollectionAppliedWhenTheWorkerStarts(t *testing.T) {
	fx := newLifecycleFixture(t)
	dir := t.TempDir()
	w := startGCWorker(t, fx, dir)
	runGCJob(t, fx, "gc-late", "open('old', 'w').write('old')")
	paths := scopePaths(w, "gc-late")
	mustExist(t, paths...)
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	collectScope(t, fx, "gc-late", time.Now())
	mustExist(t, paths...) // no worker to remove them

	w = startGCWorker(t, fx, dir)
	for _, p := range paths {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after the worker started again: %v", p, err)
		}
	}
	runGCJob(t, fx, "gc-late", "open('new', 'w').write('new')")
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	w = startGCWorker(t, fx, dir)
	// Its copy stays (not removed, then restored from the snapshot).
	mustExist(t, scopePaths(w, "gc-late")...)
	res := runGCJob(t, fx, "gc-late", "import os\nprint(sorted(f for f in os.listdir('.') if f in ('old', 'new')))")
	if strings.TrimSpace(res.Stdout) != "['new']" {
		t.Errorf("the workspace's files after a second restart: %q, want ['new']", res.Stdout)
	}
}

// A notice whose scope is not a valid one (a path, "..", a separator)
// removes nothing, inside the data directory or out of it; a valid one
// beside them is removed.
func TestCollectionStaysInItsDataDir(t *testing.T) {
	fx := newLifecycleFixture(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "data")
	w := startGCWorker(t, fx, dir)
	runGCJob(t, fx, "gc-real", "open('f', 'w').write('f')")
	var decoys []string
	for _, d := range []string{filepath.Join(parent, "victim"), filepath.Join(dir, "victim"),
		filepath.Join(w.sessionsRoot(), "victim"), filepath.Join(dir, "disks", "victim")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(d, "keep")
		if err := os.WriteFile(f, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		decoys = append(decoys, f)
	}
	decoys = append(decoys, w.sessionsRoot(), w.cfg.ScriptsDir, filepath.Join(dir, "disks"), filepath.Join(dir, "workspaces"))
	for _, scope := range []string{"..", "../victim", "../../victim", "sessions/../..", "a/../../victim", "/", "", ".", "VICTIM/..", "victim/keep", "-", "../data"} {
		collectScope(t, fx, scope, time.Now())
	}
	collectScope(t, fx, "gc-real", time.Now())
	waitGone(t, scopePaths(w, "gc-real")...)
	mustExist(t, decoys...)
	for _, scope := range []string{"..", "../victim", "a/b", "", ".", "x.json/..", strings.Repeat("a", 65)} {
		if p, err := scopePath(dir, scope, ".img"); err == nil {
			t.Errorf("scopePath(%q) = %s, want an error", scope, p)
		}
	}
}
