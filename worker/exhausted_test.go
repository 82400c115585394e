package worker

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// exhaustedFixture: a started worker, and a job of another pool whose
// consumer delivers a job once, taken by a worker "x" that claimed it and
// died (its delivery fetched, never settled; no Claimants record unless
// the test writes one). The pool's consumer keeps asking for jobs, as a
// worker of it would, so that the server finds the job's deliveries spent.
type exhaustedFixture struct {
	b    *broker.Broker
	w    *Worker
	logs *lockedBuffer
	job  *wire.Job
}

const deadPool = "deadpool"

func newExhaustedFixture(t *testing.T) *exhaustedFixture {
	t.Helper()
	fx := newLifecycleFixture(t)
	logs := &lockedBuffer{}
	w, err := New(Config{
		ID: "exhausted", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: deadPool, Scope: "exhausted-scope",
		Code: "print('ran here')", Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
	return &exhaustedFixture{b: fx.broker, w: w, logs: logs, job: job}
}

// start starts the worker, then has x take the job and die.
func (ef *exhaustedFixture) start(t *testing.T, ctx context.Context) {
	t.Helper()
	if err := ef.w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ef.w.Stop(context.Background()) })
	if err := ef.b.PublishJob(ctx, ef.job); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(ef.b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, wire.JobsStream, jetstream.ConsumerConfig{
		Durable: wire.ConsumerName(deadPool), FilterSubject: wire.JobSubject(deadPool),
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: 300 * time.Millisecond, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, won, err := ef.b.ClaimJob(ctx, ef.job.ID, broker.Claim{Worker: "x", Instance: "x@1", Attempt: 1}); err != nil || !won {
		t.Fatalf("claim as x: won=%v err=%v", won, err)
	}
	got := 0
	for got == 0 {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for range batch.Messages() {
			got++
		}
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	t.Cleanup(func() { stop(); <-done })
	go func() {
		defer close(done)
		for pctx.Err() == nil {
			batch, err := cons.Fetch(1, jetstream.FetchContext(pctx))
			if err != nil {
				return
			}
			for range batch.Messages() {
				t.Error("the job was delivered again")
			}
		}
	}()
}

// A job whose deliveries ran out, its last holder dead, gets a failed
// result that says so, without running, and leaves the stream. Before,
// the server stopped delivering it and it had no result: its caller
// waited for its deadline.
func TestExhaustedJobGetsFailedResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ef := newExhaustedFixture(t)
	ef.start(t, ctx)
	res, err := ef.b.WaitResult(ctx, ef.job.ID)
	if err != nil {
		t.Fatalf("no result: %v\n%s", err, ef.logs.String())
	}
	if res.Status != wire.StatusInternal || !strings.Contains(res.Message, "deliveries ran out") {
		t.Errorf("result %s %q, want internal saying the deliveries ran out", res.Status, res.Message)
	}
	if strings.Contains(ef.logs.String(), "job started") {
		t.Errorf("the job ran:\n%s", ef.logs.String())
	}
	js, _ := jetstream.New(ef.b.Conn())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s, err := js.Stream(ctx, wire.JobsStream)
		if err != nil {
			t.Fatal(err)
		}
		si, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.JobSubject(deadPool)))
		if err != nil {
			t.Fatal(err)
		}
		if si.State.Subjects[wire.JobSubject(deadPool)] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the exhausted job's message is still in the stream")
		}
	}
}

// A job whose deliveries ran out while its holder still runs it (alive,
// listing it) keeps that attempt's result.
func TestExhaustedJobStillRunningKeepsItsResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ef := newExhaustedFixture(t)
	beatAs(t, ef.w.store, ef.w, "x", "x@1", ef.job.ID)
	ef.start(t, ctx)
	waitLog(ctx, t, ef.logs, "an attempt still runs")
	theirs := &wire.Result{JobID: ef.job.ID, Status: wire.StatusOK, Stdout: "ran on x\n", WorkerID: "x", Attempt: 1}
	if _, err := ef.b.PutResult(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	res, err := ef.b.GetResult(ctx, ef.job.ID)
	if err != nil || res.WorkerID != "x" || res.Status != wire.StatusOK {
		t.Errorf("result %+v %v, want x's", res, err)
	}
}

// A job stored as failed because its deliveries ran out, its holder judged
// dead, has its claim taken over first: a holder that was only stopped
// (SIGSTOP), resumed, then fails to confirm its claim, and keeps neither
// its files nor its result. Its claim used to be left as it was: the
// resumed holder saved the session's files of a job its caller had been
// told failed and would not be tried again.
func TestExhaustedJobClaimTakenFromStoppedHolder(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ef := newExhaustedFixture(t)
	ef.start(t, ctx)
	xs, found, err := ef.b.GetClaim(ctx, ef.job.ID)
	if err != nil || !found {
		t.Fatalf("x's claim: found=%v err=%v", found, err)
	}
	res, err := ef.b.WaitResult(ctx, ef.job.ID)
	if err != nil || res.Status != wire.StatusInternal {
		t.Fatalf("result %+v %v, want the failure", res, err)
	}
	if _, err := ef.b.ConfirmClaim(ctx, ef.job.ID, xs); !errors.Is(err, broker.ErrClaimChanged) {
		t.Errorf("x, resumed, confirmed its claim (err %v) of a job stored as failed: it would save its files", err)
	}
}
