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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	touch := func(beat uint64) {
		data, _ := json.Marshal(claimantRecord{Instance: "x@1", Beat: beat, Jobs: jobs})
		if err := cf.fx.store.Touch(ctx, cf.w.cfg.Keys.Claimants(), "x", data, claimTTL); err != nil && ctx.Err() == nil {
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

// A job delivered while the state store is down waits for it, holding its
// delivery, and runs on that delivery once the store is back: without a
// record that others can see alive no claim is made, and a Nak a second
// instead spent one of the job's deliveries (MaxDeliver, 5) each time,
// dropping the job once they were gone.
func TestDeliveryWaitsForStateStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fx := newLifecycleFixture(t)
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	w, err := New(Config{
		ID: "storeless", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	rs.Stop()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "claims-scope",
		Code: "print('ran')", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	time.Sleep(8 * time.Second) // longer than MaxDeliver (5) Naks of a second
	rs.Restart(t)
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusOK || res.Stdout != "ran\n" || res.Attempt != 1 {
		t.Errorf("result %+v, want the first delivery's run", res)
	}
}
