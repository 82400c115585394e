package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// lockedBuffer is a bytes.Buffer safe for a logger and a test at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLog waits until the log holds want and fails the test when ctx ends
// first.
func waitLog(ctx context.Context, t *testing.T, logs *lockedBuffer, want string) {
	t.Helper()
	for !strings.Contains(logs.String(), want) {
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in the worker's log:\n%s", want, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// claimFixture is a started worker and a job claimed, before the worker
// sees it, by another worker "x" of instance "x@1" (a fake: its claim and
// its Claimants record are written by the test).
type claimFixture struct {
	fx   *lifecycleFixture
	w    *Worker
	logs *lockedBuffer
	job  *wire.Job
}

func newClaimFixture(t *testing.T, ctx context.Context) *claimFixture {
	t.Helper()
	fx := newLifecycleFixture(t)
	logs := &lockedBuffer{}
	w, err := New(Config{
		ID: "claims", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "claims-scope",
		Code: "print('ran here')", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if _, won, err := fx.broker.ClaimJob(ctx, job.ID, broker.Claim{Worker: "x", Instance: "x@1", Attempt: 1}); err != nil || !won {
		t.Fatalf("claim as x: won=%v err=%v", won, err)
	}
	return &claimFixture{fx: fx, w: w, logs: logs, job: job}
}

// beatAsX keeps x's Claimants record alive, listing jobs, every 200ms
// until the test ends.
func (cf *claimFixture) beatAsX(t *testing.T, jobs ...string) {
	beatAs(t, cf.fx.store, cf.w, "x", "x@1", jobs...)
}

// beatAs keeps the Claimants record of worker id, instance inst, alive in
// st, listing jobs, every 200ms until the test ends: another worker's
// renewals, as w reads them.
func beatAs(t *testing.T, st statestore.Store, w *Worker, id, inst string, jobs ...string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	touch := func(beat uint64) {
		data, _ := json.Marshal(claimantRecord{Instance: inst, Beat: beat, Jobs: jobs})
		if err := st.Touch(ctx, w.cfg.Keys.Claimants(), id, data, claimTTL); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}
	touch(1)
	go func() {
		defer close(done)
		for beat := uint64(2); ; beat++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
				touch(beat)
			}
		}
	}()
}

// A delivery of a job that a live attempt elsewhere runs does not run it
// again: it waits for that attempt's result and acks. Before claims, a job
// whose lease lapsed during a NATS restart ran on the worker that got it
// back while its first run was still going.
func TestDeliveryWaitsForLiveClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cf := newClaimFixture(t, ctx)
	cf.beatAsX(t, cf.job.ID)
	if err := cf.fx.broker.PublishJob(ctx, cf.job); err != nil {
		t.Fatal(err)
	}
	waitLog(ctx, t, cf.logs, "waiting for its result")
	// x finishes: its result answers the waiting delivery.
	theirs := &wire.Result{JobID: cf.job.ID, Status: wire.StatusOK, Stdout: "ran on x\n", WorkerID: "x", Attempt: 1}
	if _, err := cf.fx.broker.PutResult(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	waitLog(ctx, t, cf.logs, "result already stored; acking")
	if strings.Contains(cf.logs.String(), "job started") {
		t.Errorf("the job ran again on the worker although x's claim was alive:\n%s", cf.logs.String())
	}
	res, err := cf.fx.broker.GetResult(ctx, cf.job.ID)
	if err != nil || res.WorkerID != "x" {
		t.Errorf("result %+v %v, want x's", res, err)
	}
}

// A job claimed by a worker that has no Claimants record (dead) is taken
// over and run.
func TestDeliveryTakesOverDeadClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cf := newClaimFixture(t, ctx)
	if err := cf.fx.broker.PublishJob(ctx, cf.job); err != nil {
		t.Fatal(err)
	}
	res, err := cf.fx.broker.WaitResult(ctx, cf.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkerID != "claims" || res.Stdout != "ran here\n" {
		t.Errorf("result %+v, want the worker's own run", res)
	}
	held, found, err := cf.fx.broker.GetClaim(ctx, cf.job.ID)
	if err != nil || !found || held.Worker != "claims" || held.Instance != cf.w.instance() {
		t.Errorf("claim after the takeover: %+v found=%v err=%v", held, found, err)
	}
}

// A claim whose holder lives but no longer runs the job (its record, renewed
// twice since, does not list it) is taken over.
func TestDeliveryTakesOverClaimLeftBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cf := newClaimFixture(t, ctx)
	cf.beatAsX(t, "SOMEOTHERJOB")
	if err := cf.fx.broker.PublishJob(ctx, cf.job); err != nil {
		t.Fatal(err)
	}
	res, err := cf.fx.broker.WaitResult(ctx, cf.job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkerID != "claims" {
		t.Errorf("result %+v, want the worker's own run", res)
	}
	if !strings.Contains(cf.logs.String(), "holder_alive=true") {
		t.Errorf("the takeover was not of a live holder's claim:\n%s", cf.logs.String())
	}
}

// While a job runs, its worker's Claimants record lists it under the
// worker's instance, and its claim names that instance: what another
// worker's delivery of the job reads.
func TestRunningJobIsListed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	w, err := New(Config{
		ID: "listed", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "claims-scope",
		Code: "import time; time.sleep(3)", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	for {
		held, found, err := fx.broker.GetClaim(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if found {
			if held.Instance != w.instance() {
				t.Fatalf("claim %+v, want instance %s", held, w.instance())
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the job was never claimed")
		case <-time.After(20 * time.Millisecond):
		}
	}
	members, err := fx.store.Members(ctx, w.cfg.Keys.Claimants())
	if err != nil {
		t.Fatal(err)
	}
	var rec claimantRecord
	if err := json.Unmarshal(members["listed"], &rec); err != nil {
		t.Fatalf("no Claimants record of the worker: %v %q", err, members)
	}
	if rec.Instance != w.instance() || len(rec.Jobs) != 1 || rec.Jobs[0] != job.ID {
		t.Errorf("Claimants record %+v while the job runs, want it listed under %s", rec, w.instance())
	}
	if _, err := fx.broker.WaitResult(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
}

// A job delivered while the state store is down runs on that delivery,
// while the store is still down: its claim, create-only in JetStream, is
// the exclusion, and the Claimants record is written once the store is
// back. Jobs used to be held until then, delaying every call by the
// outage.
func TestDeliveryRunsWithoutStateStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	w := startRedisWorker(t, ctx, fx, st, "storeless", slog.DiscardHandler)

	rs.Stop()
	// A session its frontend knew to have no files: one with files would
	// run only on their holder (TestWorkspaceWhileStoreIsDown).
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "claims-scope",
		Code: "print('ran')", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
		KnownHolder: wire.NoHolder,
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	// Bounded well within the test, so that a job held until the store is
	// back fails here rather than hanging.
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	res, err := fx.broker.WaitResult(dctx, job.ID)
	if err != nil {
		t.Fatalf("no result while the store is down: %v", err)
	}
	if res.Status != wire.StatusOK || res.Stdout != "ran\n" || res.Attempt != 1 {
		t.Errorf("result %+v, want the first delivery's run", res)
	}
	held, found, err := fx.broker.GetClaim(ctx, job.ID)
	if err != nil || !found || held.Instance != w.instance() {
		t.Errorf("claim %+v found=%v err=%v, want the worker's", held, found, err)
	}
}

// startRedisWorker starts a worker of id on fx's broker and st, logging
// to h, with a heartbeat every second (so that it sees an outage of st
// soon).
func startRedisWorker(t *testing.T, ctx context.Context, fx *lifecycleFixture, st statestore.Store, id string, h slog.Handler) *Worker {
	t.Helper()
	w, err := New(Config{
		ID: id, DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, HeartbeatInterval: time.Second, Logger: slog.New(h),
	}, fx.broker, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// Right after a store outage, a holder's missing Claimants record does
// not make it dead: the record may have expired during the outage, its
// holder (alive, having claimed the job while the store was down) yet to
// write it again. A worker that saw the store fail within claimTTL waits;
// once it has seen the store steady for that long, a missing record is a
// dead holder's and the job is taken over. Holders x and y are other
// workers whose claims and records the test writes.
func TestDeliveryAfterStoreOutageWaitsForHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	logs := &lockedBuffer{}
	w := startRedisWorker(t, ctx, fx, st, "judge", slog.NewTextHandler(logs, nil))

	rs.Stop()
	waitLog(ctx, t, logs, "heartbeat failed")
	rs.Restart(t)
	// x claimed the job while the store was down; its record is not back
	// yet.
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "claims-scope",
		Code: "print('ran here')", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if _, won, err := fx.broker.ClaimJob(ctx, job.ID, broker.Claim{Worker: "x", Instance: "x@1", Attempt: 1}); err != nil || !won {
		t.Fatalf("claim as x: won=%v err=%v", won, err)
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	if waitLogEither(ctx, t, logs, "waiting for its result", "taking over") != "waiting for its result" {
		t.Fatalf("x's claim was taken over right after the outage, its record not yet renewed:\n%s", logs.String())
	}
	// x renews its record, and finishes.
	beatAs(t, st, w, "x", "x@1", job.ID)
	theirs := &wire.Result{JobID: job.ID, Status: wire.StatusOK, Stdout: "ran on x\n", WorkerID: "x", Attempt: 1}
	if _, err := fx.broker.PutResult(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	waitLog(ctx, t, logs, "result already stored; acking")
	if strings.Contains(logs.String(), "job started") || strings.Contains(logs.String(), "taking over") {
		t.Fatalf("the job ran again although x was alive:\n%s", logs.String())
	}

	// y, dead, claimed another job and left no record: once the store
	// has been steady for claimTTL, the job is taken over and runs.
	job2 := *job
	job2.ID = ulid.Make().String()
	if _, won, err := fx.broker.ClaimJob(ctx, job2.ID, broker.Claim{Worker: "y", Instance: "y@1", Attempt: 1}); err != nil || !won {
		t.Fatalf("claim as y: won=%v err=%v", won, err)
	}
	if err := fx.broker.PublishJob(ctx, &job2); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkerID != "judge" || res.Stdout != "ran here\n" {
		t.Errorf("result %+v, want the judge's run after taking y's claim over", res)
	}
	if !strings.Contains(logs.String(), "holder=y") {
		t.Errorf("no take over of y's claim logged:\n%s", logs.String())
	}
}

// waitLogEither waits until the log holds a or b and returns the one it
// found first (a when both); it fails the test when ctx ends first.
func waitLogEither(ctx context.Context, t *testing.T, logs *lockedBuffer, a, b string) string {
	t.Helper()
	for {
		out := logs.String()
		if strings.Contains(out, a) {
			return a
		}
		if strings.Contains(out, b) {
			return b
		}
		select {
		case <-ctx.Done():
			t.Fatalf("neither %q nor %q in the worker's log:\n%s", a, b, out)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A worker whose claim was taken over while its attempt ran (it was stopped,
// SIGSTOP, past the claimants record's life, and another worker judged it
// dead and ran the job) neither saves the session's files nor stores its
// result once it goes on: those of the attempt that took the job over are
// the session's. It used to store its result first, which every reader then
// got, while the other attempt's save replaced the files that result spoke
// of: a caller's answer and its session's files disagreed, and what the
// answer said was written was lost.
func TestSupersededAttemptKeepsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	logs := &lockedBuffer{}
	w, err := New(Config{
		ID: "stopped", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "superseded-scope",
		Code:     "import time\nopen('log', 'a').write('stopped\\n')\ntime.sleep(2)\nprint('ran on stopped')",
		Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitLog(ctx, t, logs, "job started")
	held, found, err := fx.broker.GetClaim(ctx, job.ID)
	if err != nil || !found {
		t.Fatalf("claim: found=%v err=%v", found, err)
	}
	// Another worker takes the claim over, as one that found this worker's
	// record lapsed would, and is still running the job.
	if _, err := fx.broker.TakeOverClaim(ctx, job.ID, broker.Claim{Worker: "x", Instance: "x@1", Attempt: 2}, held.Revision); err != nil {
		t.Fatal(err)
	}
	beatAs(t, fx.store, w, "x", "x@1", job.ID)
	waitLog(ctx, t, logs, "another worker took this job over")
	time.Sleep(time.Second)
	if res, err := fx.broker.GetResult(ctx, job.ID); err == nil {
		t.Errorf("the superseded attempt stored its result: %+v", res)
	}
	if rec, err := w.readWorkspace(ctx, job.Scope); err != nil || rec.Worker == "stopped" {
		t.Errorf("the superseded attempt recorded its files as the session's: %+v %v", rec, err)
	}
	// The attempt that took the job over stores its result: the one every
	// reader gets.
	theirs := &wire.Result{JobID: job.ID, Status: wire.StatusOK, Stdout: "ran on x\n", WorkerID: "x", Attempt: 2}
	if _, err := fx.broker.PutResult(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil || res.WorkerID != "x" {
		t.Errorf("result %+v %v, want x's", res, err)
	}
}
