package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/workspace"
)

// A session's files follow it from one worker to another: a worker that
// changed the session's directory snapshots it before the result is
// stored and records itself as the holder; a worker whose copy is of an
// older snapshot (or that has none) restores the latest one first, owned
// by its own uid for the session, with what was deleted since gone; a job
// that changes nothing stores no snapshot.
func TestWorkspaceFollowsTheSession(t *testing.T) {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(id string, local bool) *Worker {
		w, err := New(Config{
			ID: id, DataDir: t.TempDir(), Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
			Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler), LocalWorkspaces: local,
		}, fx.broker, fx.store)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		return w
	}
	a, b, local := start("ws-a", false), start("ws-b", false), start("ws-local", true)
	const scope = "workspace-scope"
	run := func(w *Worker, code string) (*wire.Result, string) {
		t.Helper()
		job := &wire.Job{
			ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
			Code: code, Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
		}
		if err := fx.broker.PublishJob(ctx, job, broker.ToWorker(w.ID())); err != nil {
			t.Fatal(err)
		}
		res, err := fx.broker.WaitResult(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != wire.StatusOK || res.WorkerID != w.ID() {
			t.Fatalf("%s on %s: %s %s %q", code, res.WorkerID, res.Status, res.Message, res.Stderr)
		}
		return res, job.ID
	}
	record := func() wire.Workspace {
		t.Helper()
		data, err := fx.store.Get(ctx, a.cfg.Keys.Workspace(scope))
		if err != nil {
			t.Fatal(err)
		}
		var rec wire.Workspace
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}

	_, write := run(a, "import os\nos.makedirs('d', exist_ok=True)\nopen('d/note.txt', 'w').write('kept')\nopen('old.txt', 'w').write('x')")
	if rec := record(); rec.Worker != "ws-a" || rec.Snapshot != write || !rec.Stored || rec.SavedAt.IsZero() {
		t.Fatalf("after the write on ws-a: %+v", rec)
	}
	run(a, "print(open('d/note.txt').read())")
	if rec := record(); rec.Snapshot != write {
		t.Errorf("a job that changed nothing took snapshot %s", rec.Snapshot)
	}

	res, _ := run(b, "print(open('d/note.txt').read())")
	if res.Stdout != "kept\n" {
		t.Fatalf("on ws-b, the file written on ws-a: %q", res.Stdout)
	}
	if rec := record(); rec.Worker != "ws-b" || rec.Snapshot != write {
		t.Errorf("after a read on ws-b: %+v, want ws-b holding %s", rec, write)
	}
	cwd := sessionWork(b, scope)
	for _, name := range []string{"d", "d/note.txt"} {
		dirInfo, _ := os.Stat(cwd)
		info, err := os.Lstat(filepath.Join(cwd, name))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := info.Sys().(*syscall.Stat_t).Uid, dirInfo.Sys().(*syscall.Stat_t).Uid; got != want {
			t.Errorf("restored %s is owned by %d, the session's directory on ws-b by %d", name, got, want)
		}
	}

	_, rewrite := run(b, "import os\nos.remove('old.txt')\nopen('new.txt', 'w').write('from b')")
	if rec := record(); rec.Worker != "ws-b" || rec.Snapshot != rewrite || !rec.Stored {
		t.Fatalf("after the write on ws-b: %+v", rec)
	}
	if _, err := fx.broker.GetWorkspace(ctx, snapshotName(scope, write)); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("the replaced snapshot is still stored: %v", err)
	}
	// A restore that fails half-way (here: a job whose disk limit is below
	// the snapshot's size) fails that job, and the next job restores again.
	cwdA := sessionWork(a, scope)
	log := slog.New(slog.DiscardHandler)
	if _, err := a.restoreWorkspace(ctx, scope, cwdA, os.Getuid(), nil, 3, "", log); !errors.Is(err, workspace.ErrTooLarge) {
		t.Fatalf("a restore past the job's disk limit: %v, want ErrTooLarge", err)
	}
	res, _ = run(a, "import os\nprint(sorted(os.listdir('.')), open('new.txt').read())")
	if want := "['d', 'new.txt'] from b\n"; res.Stdout != want {
		t.Errorf("back on ws-a: %q, want %q", res.Stdout, want)
	}

	// A snapshot nearing its expiry is stored again by the next job, even
	// one that changes nothing, so that an unchanging session keeps it.
	aged := record()
	aged.SavedAt = time.Now().Add(-2 * snapshotRefresh)
	data, _ := json.Marshal(aged)
	if err := fx.store.Set(ctx, a.cfg.Keys.Workspace(scope), data, 0); err != nil {
		t.Fatal(err)
	}
	_, renew := run(a, "print(1)")
	if rec := record(); rec.Snapshot != renew || !rec.Stored || time.Since(rec.SavedAt) > time.Minute {
		t.Errorf("an aged snapshot was not stored again: %+v", rec)
	}
	if _, err := fx.broker.GetWorkspace(ctx, snapshotName(scope, aged.Snapshot)); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("the aged snapshot is still stored: %v", err)
	}

	// A worker with LocalWorkspaces (codexec dev) stores no snapshot and
	// records no holder.
	before := record()
	run(local, "open('local.txt', 'w').write('here only')")
	if rec := record(); rec != before {
		t.Errorf("a worker keeping its workspaces local recorded %+v (was %+v)", rec, before)
	}

	// A directory with more bytes of files than the job's disk limit is not
	// stored: the record says so, and the previous snapshot, which the
	// record no longer names, goes (TestUnstoredSnapshotLeavesNoneBehind).
	prev := record()
	if err := os.WriteFile(filepath.Join(cwdA, "big"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := a.restoreWorkspace(ctx, scope, cwdA, os.Getuid(), nil, 32<<10, "", log)
	if err != nil {
		t.Fatal(err)
	}
	tooLarge := ulid.Make().String()
	a.saveWorkspace(ctx, j, tooLarge, cwdA, log)
	if rec := record(); rec.Worker != "ws-a" || rec.Snapshot != tooLarge || rec.Stored {
		t.Errorf("after a snapshot too large to store: %+v", rec)
	}
	if _, err := fx.broker.GetWorkspace(ctx, snapshotName(scope, tooLarge)); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("the snapshot past the limit: %v, want none stored", err)
	}
	if _, err := fx.broker.GetWorkspace(ctx, snapshotName(scope, prev.Snapshot)); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("the previous snapshot, named by no record, is still stored: %v", err)
	}

	// A directory of more entries than its disk limit allows files (hard
	// links of one empty file, which take no disk) is not walked whole nor
	// stored either, and the call's result says so.
	if err := os.Remove(filepath.Join(cwdA, "big")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwdA, "one"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range workspace.MaxEntries(32 << 10) {
		if err := os.Link(filepath.Join(cwdA, "one"), filepath.Join(cwdA, fmt.Sprintf("link%06d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if j, err = a.restoreWorkspace(ctx, scope, cwdA, os.Getuid(), nil, 32<<10, "", log); err != nil {
		t.Fatal(err)
	}
	tooMany := ulid.Make().String()
	note := a.saveWorkspace(ctx, j, tooMany, cwdA, log)
	if !strings.Contains(note, "not saved") || !strings.Contains(note, "entries") {
		t.Errorf("the note for a directory of too many entries: %q", note)
	}
	if rec := record(); rec.Worker != "ws-a" || rec.Snapshot != tooMany || rec.Stored {
		t.Errorf("after a directory of too many entries: %+v", rec)
	}
	if _, err := fx.broker.GetWorkspace(ctx, snapshotName(scope, tooMany)); !errors.Is(err, broker.ErrWorkspaceNotFound) {
		t.Errorf("the snapshot of too many entries: %v, want none stored", err)
	}

	// Another worker, finding the latest snapshot not stored, runs on its
	// own copy, and saves that copy as the session's files from now on,
	// though the job changed nothing.
	_, onB := run(b, "print(1)")
	if rec := record(); rec.Worker != "ws-b" || rec.Snapshot != onB || !rec.Stored {
		t.Errorf("after a job on ws-b's own copy: %+v, want ws-b holding %s, stored", rec, onB)
	}
}

// A snapshot the record no longer names is read by nothing, so it must not
// stay in the store: a session whose jobs alternate a directory that fits
// the job's disk limit (stored) and one that does not (not stored: here
// the same files under a smaller limit, as a call with a smaller disk_mb
// makes) keeps one snapshot at most. Before, the stored snapshot before
// each unstored one stayed for the store's retention, counted by no quota:
// through the cluster, a tenant under working_dir_bytes of 100 MiB left
// 40 MB in the workspaces store per pair of calls, a second each.
func TestUnstoredSnapshotLeavesNoneBehind(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	st := openBoltStore(t)
	w := &Worker{cfg: Config{ID: "orphans", DataDir: t.TempDir()}, broker: br, store: st}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	const scope = "orphan-scope"
	cwd := t.TempDir()
	var snapshots []string
	for i := 0; i < 6; i++ {
		if err := os.WriteFile(filepath.Join(cwd, "big"), make([]byte, 64<<10+i), 0o644); err != nil {
			t.Fatal(err)
		}
		maxLen := int64(1 << 20)
		if i%2 == 1 {
			maxLen = 32 << 10 // the directory does not fit: not stored
		}
		j, err := w.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, maxLen, "", log)
		if err != nil {
			t.Fatal(err)
		}
		id := ulid.Make().String()
		w.saveWorkspace(ctx, j, id, cwd, log)
		snapshots = append(snapshots, id)
	}
	for i, id := range snapshots {
		r, err := br.GetWorkspace(ctx, snapshotName(scope, id))
		if err == nil {
			r.Close()
			t.Errorf("snapshot %d of %d (stored: %v) is still in the store, named by no record", i+1, len(snapshots), i%2 == 0)
		} else if !errors.Is(err, broker.ErrWorkspaceNotFound) {
			t.Fatal(err)
		}
	}
}

// BenchmarkWorkspaceSnapshot measures, for a small workspace (20 files of
// 1 KiB), what a job that changed its session's files adds to its path on
// the worker (manifest, then the tar streamed into an in-process
// JetStream object store) and what a worker pays to restore it.
func BenchmarkWorkspaceSnapshot(b *testing.B) {
	e := brokertest.StartNATS(b)
	br := brokertest.Open(b, e, broker.Config{})
	w := &Worker{broker: br}
	dir := b.TempDir()
	for i := 0; i < 20; i++ {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), make([]byte, 1024), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	j := &workspaceJob{scope: "bench", maxLen: 1 << 30}
	b.Run("save", func(b *testing.B) {
		for b.Loop() {
			if _, err := workspace.Manifest(dir, 1<<30); err != nil {
				b.Fatal(err)
			}
			if stored, _ := w.putSnapshot(ctx, j, "s", dir, log); !stored {
				b.Fatal("not stored")
			}
		}
	})
	into := b.TempDir()
	b.Run("restore", func(b *testing.B) {
		for b.Loop() {
			r, err := br.GetWorkspace(ctx, snapshotName("bench", "s"))
			if err != nil {
				b.Fatal(err)
			}
			if err := workspace.Unpack(r, into, os.Getuid(), os.Getgid(), 1<<30); err != nil {
				b.Fatal(err)
			}
			r.Close()
		}
	})
}

// A job's files saved while the state store is away stay the session's
// files. The snapshot is stored but the record naming it cannot be
// written, so the record still names the snapshot before the job. Before,
// the worker remembered its copy as the new snapshot all the same: the
// next job, once Redis answered again, found its copy to be of another
// snapshot than the recorded one and restored that one over it, so what the
// job wrote (its call answered ok) was gone, on the very worker that ran
// it. Through the cluster, a Redis killed for a second during a job was
// enough.
func TestWorkspaceSavedWhileStoreAwayIsKept(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	ctx, srv, st := redisStore(t)
	w := &Worker{cfg: Config{ID: "away", DataDir: t.TempDir()}, broker: br, store: st}
	log := slog.New(slog.DiscardHandler)
	const scope = "away-scope"
	cwd := t.TempDir()
	job := func(write string) {
		t.Helper()
		j, err := w.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
		if err != nil {
			t.Fatal(err)
		}
		if write != "" {
			if err := os.WriteFile(filepath.Join(cwd, write), []byte(write), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		w.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
	}
	job("before.txt")

	// The job starts with the store there, and ends with it gone.
	j, err := w.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "during.txt"), []byte("during"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr
	srv.Kill()
	w.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
	srv.Restart(t)
	if srv.Addr != addr {
		t.Fatalf("redis-server came back on %s, not %s", srv.Addr, addr)
	}
	for ctx.Err() == nil {
		if _, err := w.readWorkspace(ctx, scope); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}

	job("after.txt")
	names, err := os.ReadDir(cwd)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if want := "after.txt before.txt during.txt"; strings.Join(got, " ") != want {
		t.Fatalf("the session's directory after the store came back: %q, want %q", got, want)
	}
	// And it was saved: another worker's copy restores all of it.
	other := &Worker{cfg: Config{ID: "other", DataDir: t.TempDir()}, broker: br, store: st}
	into := t.TempDir()
	if _, err := other.restoreWorkspace(ctx, scope, into, os.Getuid(), nil, 1<<20, "", log); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(into, "during.txt")); err != nil {
		t.Errorf("the file written while the store was away is not in the saved snapshot: %v", err)
	}
}

// A session whose record the state store lost (Redis restarted empty, or
// from an older copy) keeps its files: the worker that runs its next job,
// finding no record, restores the session's newest snapshot. It used to run
// the job on its own copy, an empty directory, answer ok, and save that as
// the session's files (a fault run: Redis emptied after three appends to a
// session's file, the next call found none of them).
func TestWorkspaceKeptWhenItsRecordIsLost(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	st := openBoltStore(t)
	a := &Worker{cfg: Config{ID: "lost-a", DataDir: t.TempDir()}, broker: br, store: st}
	b := &Worker{cfg: Config{ID: "lost-b", DataDir: t.TempDir()}, broker: br, store: st}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	const scope = "lost-record-scope"
	cwdA, cwdB := t.TempDir(), t.TempDir()
	j, err := a.restoreWorkspace(ctx, scope, cwdA, os.Getuid(), nil, 1<<20, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwdA, "log"), []byte("line0\nline1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.saveWorkspace(ctx, j, ulid.Make().String(), cwdA, log)
	if err := st.Delete(ctx, a.cfg.Keys.Workspace(scope)); err != nil {
		t.Fatal(err)
	}
	j, err = b.restoreWorkspace(ctx, scope, cwdB, os.Getuid(), nil, 1<<20, wire.NoHolder, log)
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(cwdB, "log")); err != nil || string(data) != "line0\nline1\n" {
		t.Fatalf("the session's file on the next worker, with its record lost: %q %v", data, err)
	}
	b.saveWorkspace(ctx, j, ulid.Make().String(), cwdB, log)
	if rec, err := b.readWorkspace(ctx, scope); err != nil || rec.Worker != "lost-b" || !rec.Stored {
		t.Errorf("record after the next job: %+v %v, want lost-b's, stored", rec, err)
	}
}

// A copy changed after its last save by an attempt that the worker's end
// cut off (kill -9 between the job's write and its save) is restored from
// the recorded snapshot by the restarted worker before the job, delivered
// again, runs on it: the session's files hold the effects of one attempt.
// Until 2026-12-04 the restarted worker ran the job over the cut-off
// attempt's changes (a line appended twice). A worker that ran on does
// not check its copy again.
func TestRestartedWorkerRestoresACopyChangedSinceItsSave(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	st := openBoltStore(t)
	cfg := Config{ID: "restart-a", DataDir: t.TempDir()}
	a := &Worker{cfg: cfg, broker: br, store: st}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	const scope = "restarted-copy-scope"
	cwd := t.TempDir()
	logFile := filepath.Join(cwd, "log")
	j, err := a.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logFile, []byte("line0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
	appendLine := func(line string) { t.Helper(); appendTo(t, logFile, line) }
	read := func() string {
		data, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}

	// The same process's next job runs on its copy as it is.
	if _, err := a.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log); err != nil {
		t.Fatal(err)
	}
	// An attempt appends, then the worker is killed before it saves.
	appendLine("line1 of an attempt cut off\n")

	restarted := &Worker{cfg: cfg, broker: br, store: st}
	j, err = restarted.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "line0\n" {
		t.Fatalf("the restarted worker's copy before the job runs again: %q, want the saved %q", got, "line0\n")
	}
	appendLine("line1\n")
	restarted.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)

	// Checked once: an unsaved change of this very process (a job of the
	// session still running here, in a real worker) is not restored over.
	appendLine("line2 unsaved\n")
	if _, err := restarted.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log); err != nil {
		t.Fatal(err)
	}
	if got, want := read(), "line0\nline1\nline2 unsaved\n"; got != want {
		t.Fatalf("the running worker's copy: %q, want %q", got, want)
	}
}

// A session whose record the state store lost (restarted empty) and then
// cannot give (unreachable again, or to this worker still) is not run on a
// worker that holds no copy of it, whatever the frontend, which read no
// record, says: its stored snapshot shows it has files. It ran on an empty
// directory, its caller told a count of lines that no file of the session
// held, and what it wrote was dropped.
func TestNoCopyNotRunWhenTheSessionHasASnapshot(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	a := &Worker{cfg: Config{ID: "snap-a", DataDir: t.TempDir()}, broker: br, store: st}
	b := &Worker{cfg: Config{ID: "snap-b", DataDir: t.TempDir()}, broker: br, store: st}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	const scope = "lost-and-away-scope"
	cwdA, cwdB := t.TempDir(), t.TempDir()
	j, err := a.restoreWorkspace(ctx, scope, cwdA, os.Getuid(), nil, 1<<20, "", log)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwdA, "log"), []byte("line0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.saveWorkspace(ctx, j, ulid.Make().String(), cwdA, log)
	_ = st.Close() // the state store unreachable

	_, err = b.restoreWorkspace(ctx, scope, cwdB, os.Getuid(), nil, 1<<20, wire.NoHolder, log)
	var fu *filesUnreachable
	if !errors.As(err, &fu) {
		t.Fatalf("a job of a session with a stored snapshot, on a worker with no copy, the record unreadable: %v, want it refused", err)
	}
	// A session with no snapshot anywhere still runs: its first call.
	if _, err := b.restoreWorkspace(ctx, "new-session-scope", t.TempDir(), os.Getuid(), nil, 1<<20, wire.NoHolder, log); err != nil {
		t.Fatalf("a new session's first job while the store is away: %v", err)
	}
}

// A holder whose snapshot was stored (and linked as the session's newest)
// but whose record could not be written, and whose session then changed
// while the store was away, runs the session's next job on its copy when
// the store comes back without the record (restarted empty): the link
// names that snapshot, which the copy holds with what changed since. It
// took the link for a newer snapshot of another worker and restored it,
// dropping what the session wrote while the store was away (a call
// answered ok, its line gone).
func TestHolderKeepsItsChangesWhenTheRecordIsLost(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	st := openBoltStore(t)
	a := &Worker{cfg: Config{ID: "holder-a", DataDir: t.TempDir()}, broker: br, store: st}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	const scope = "unrecorded-holder-scope"
	cwd := t.TempDir()
	logFile := filepath.Join(cwd, "log")
	appendLine := func(line string) { t.Helper(); appendTo(t, logFile, line) }
	run := func(line string) {
		t.Helper()
		j, err := a.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
		if err != nil {
			t.Fatal(err)
		}
		appendLine(line)
		a.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
	}
	run("line0\n")
	// The next job: its record is read, then the store goes away before
	// the record naming its stored snapshot is written.
	j, err := a.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
	if err != nil {
		t.Fatal(err)
	}
	appendLine("line1\n")
	_ = st.Close()
	a.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
	// A job while the store is away, on the holder's copy.
	run("line2\n")
	// The store back, empty.
	a.store = openBoltStore(t)
	run("line3\n")
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "line0\nline1\nline2\nline3\n"; got != want {
		t.Fatalf("the session's file after the store came back empty: %q, want %q", got, want)
	}
}

// What the holder's copy gained while the store was away reaches the worker
// the session's next job goes to when the store comes back without the
// session's record (restarted empty): the changed copy is stored, and
// linked as the session's newest. Kept on the holder only, it was lost
// when that job went to another worker, which restored the older snapshot
// (a call answered ok, its line gone).
func TestChangesWhileStoreAwayReachTheNextWorker(t *testing.T) {
	e := brokertest.StartNATS(t)
	br := brokertest.Open(t, e, broker.Config{})
	st := openBoltStore(t)
	a := &Worker{cfg: Config{ID: "away-a", DataDir: t.TempDir()}, broker: br, store: st}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	const scope = "away-changes-scope"
	cwdA := t.TempDir()
	run := func(w *Worker, cwd, line string) {
		t.Helper()
		j, err := w.restoreWorkspace(ctx, scope, cwd, os.Getuid(), nil, 1<<20, "", log)
		if err != nil {
			t.Fatal(err)
		}
		appendTo(t, filepath.Join(cwd, "log"), line)
		w.saveWorkspace(ctx, j, ulid.Make().String(), cwd, log)
	}
	run(a, cwdA, "line0\n")
	_ = st.Close()            // the store away
	run(a, cwdA, "line1\n")   // on the holder's copy
	empty := openBoltStore(t) // back, empty
	b := &Worker{cfg: Config{ID: "away-b", DataDir: t.TempDir()}, broker: br, store: empty}
	cwdB := t.TempDir()
	run(b, cwdB, "line2\n")
	data, err := os.ReadFile(filepath.Join(cwdB, "log"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "line0\nline1\nline2\n"; got != want {
		t.Fatalf("the session's file on the next worker: %q, want %q", got, want)
	}
	// The holder, once the record names b's files, restores them.
	a.store = empty
	run(a, cwdA, "line3\n")
	if data, err := os.ReadFile(filepath.Join(cwdA, "log")); err != nil || string(data) != "line0\nline1\nline2\nline3\n" {
		t.Fatalf("the session's file back on the holder: %q %v", data, err)
	}
}

// openBoltStore opens a state store of its own for the test, closed at its
// end.
func openBoltStore(t *testing.T) statestore.Store {
	t.Helper()
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// appendTo appends line to the file at path, made if missing.
func appendTo(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Fatal(err)
	}
}
