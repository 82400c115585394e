package worker

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// After each job the worker records what the job's working directory
// takes in its tenant's tally, up after a write and down after a delete,
// the sum following; a batch job's directory is recorded too (until
// 2026-12-04 it was not, and no quota counted a batch's files).
func TestWorkerReportsWorkdirBytes(t *testing.T) {
	rig := newTallyRig(t, "workdir-bytes")
	ctx, fx, tally := rig.ctx, rig.fx, rig.tally
	run, recorded := rig.run, rig.recorded
	sum := func() int64 {
		t.Helper()
		n, err := statestore.TallySum(ctx, fx.store, tally)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	write := func(name string) string {
		return fmt.Sprintf("import os\nopen(%q, 'wb').write(os.urandom(300_000))", name)
	}

	run("workdir-a", "", write("big"))
	run("workdir-b", "", write("big"))
	a, b := recorded("workdir-a"), recorded("workdir-b")
	if a < 300_000 || b < 300_000 || sum() != a+b {
		t.Fatalf("after writing 300,000 bytes in each: recorded %d and %d, sum %d", a, b, sum())
	}
	run("workdir-a", "", "import os\nos.remove('big')")
	if got := recorded("workdir-a"); got >= 300_000 || sum() != max(got, 0)+b {
		t.Fatalf("after the delete: recorded %d (before %d), sum %d", got, a, sum())
	}
	run("workdir-batch", "batch-of-the-test-0001", write("big"))
	if got := recorded("workdir-batch"); got < 300_000 || sum() != max(recorded("workdir-a"), 0)+b+got {
		t.Fatalf("a batch job's directory after writing 300,000 bytes: recorded %d, sum %d", got, sum())
	}
}

// A measured directory (no file system of its own) is walked on the job's
// path: after a walk that took d, the next comes no sooner than 10·d
// later, as the disk watch's walks, so a large tree costs its jobs at most
// a tenth of their time.
func TestMeasuredWorkdirWalkedAtMostATenthOfTheTime(t *testing.T) {
	var r workdirReports
	t0 := time.Unix(1_000_000, 0)
	if !r.walkDue("s", t0) {
		t.Fatal("a directory never walked is not due")
	}
	r.walked("s", t0, 30*time.Millisecond)
	if r.walkDue("s", t0.Add(299*time.Millisecond)) {
		t.Fatal("walked again within ten times its last walk's 30 ms")
	}
	if !r.walkDue("s", t0.Add(300*time.Millisecond)) || !r.walkDue("other", t0) {
		t.Fatal("not due once ten times the walk has passed, or another scope held back")
	}
}

// A sparse file takes almost no blocks, so the disk counted it as almost
// nothing, but its snapshot (a tar, which holds every byte of its size)
// took all of them in the workspaces store, and as many on the disk of
// the worker that restores it: a tenant under working_dir_bytes held
// sessions whose snapshots took up to each one's disk limit, counted by no
// quota. The tally counts a stored snapshot's bytes when they are more.
func TestWorkerReportsSnapshotBytesOfSparseFiles(t *testing.T) {
	rig := newTallyRig(t, "workdir-sparse")
	run := func(code string) { t.Helper(); rig.run("workdir-sparse", "", code) }
	recorded := func() int64 {
		t.Helper()
		n := rig.recorded("workdir-sparse")
		if n < 0 {
			t.Fatal("the tally holds nothing for the session")
		}
		return n
	}
	const size = 48 << 20
	run(fmt.Sprintf("with open('hole', 'wb') as f:\n    f.truncate(%d)", size))
	if got := recorded(); got < size {
		t.Fatalf("a sparse file of %d bytes, stored in the session's snapshot: recorded %d bytes", size, got)
	}
	run("import os\nos.remove('hole')")
	if got := recorded(); got >= size {
		t.Fatalf("after the sparse file's removal: recorded %d bytes", got)
	}
}

// tallyRig is a started sandboxed worker of one slot, and its tenant
// acme's tally of working directories.
type tallyRig struct {
	t     *testing.T
	ctx   context.Context
	fx    *lifecycleFixture
	w     *Worker
	tally string
}

func newTallyRig(t *testing.T, id string) *tallyRig {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	w, err := New(Config{
		ID: id, DataDir: fx.dataDir, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return &tallyRig{t: t, ctx: ctx, fx: fx, w: w, tally: w.cfg.Keys.TenantWorkdirs(wire.TenantKey("acme"))}
}

// run runs code as a job of scope (and batch) of tenant acme, which must
// end ok.
func (r *tallyRig) run(scope, batch, code string) {
	r.t.Helper()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope, Tenant: "acme", Batch: batch,
		Code: code, Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if err := r.fx.broker.PublishJob(r.ctx, job, broker.ToWorker(r.w.ID())); err != nil {
		r.t.Fatal(err)
	}
	if res, err := r.fx.broker.WaitResult(r.ctx, job.ID); err != nil || res.Status != wire.StatusOK {
		r.t.Fatalf("%s: %v %+v", code, err, res)
	}
}

// recorded is the bytes the tally holds for scope, -1 when none.
func (r *tallyRig) recorded(scope string) int64 {
	r.t.Helper()
	v, err := r.fx.store.HGet(r.ctx, r.tally, scope)
	if err != nil {
		return -1
	}
	n, _ := strconv.ParseInt(string(v), 10, 64)
	return n
}
