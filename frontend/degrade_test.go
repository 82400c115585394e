package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
)

// These tests stop a real redis-server under a frontend and check what it
// still does: what needs the store's answer degrades to what the frontend
// last knew, and what it cannot know is refused with the reason.

func openRedis(t *testing.T, rs *redistest.Server) statestore.Store {
	t.Helper()
	st, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestSessionEnvWhileStoreIsDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ctx := t.Context()
	f, err := New(Config{}, nil, openRedis(t, rs))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(Config{}, nil, openRedis(t, rs))
	if err != nil {
		t.Fatal(err)
	}
	spec, err := envspec.Spec{Manager: envspec.ManagerVenv, Packages: []string{"six"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.setSessionEnv(ctx, "s-chose", &spec, spec.ID()); err != nil {
		t.Fatal(err)
	}
	if env, _, err := f.sessionEnv(ctx, "s-default"); env != nil || err != nil {
		t.Fatalf("a session that chose nothing: %v, %v", env, err)
	}

	rs.Stop()
	env, id, err := f.sessionEnv(ctx, "s-chose")
	if err != nil || env == nil || id != spec.ID() || env.ID() != spec.ID() {
		t.Fatalf("a session this frontend switched, store down: %v %q %v", env, id, err)
	}
	if env, _, err := f.sessionEnv(ctx, "s-default"); env != nil || err != nil {
		t.Fatalf("a session this frontend read as default, store down: %v, %v", env, err)
	}
	// A session this frontend never saw may have chosen another
	// environment elsewhere: refused, with the reason.
	if _, _, err := other.sessionEnv(ctx, "s-chose"); !errors.Is(err, ErrStoreUnreachable) || !strings.Contains(err.Error(), "nothing was run") {
		t.Fatalf("a session this frontend never saw: %v", err)
	}

	rs.Restart(t)
	// Back, the store's answer wins over what the frontend remembers.
	if err := other.setSessionEnv(ctx, "s-chose", nil, ""); err != nil {
		t.Fatal(err)
	}
	if env, _, err := f.sessionEnv(ctx, "s-chose"); env != nil || err != nil {
		t.Fatalf("the store said default, the frontend remembered %s: got %v, %v", spec.ID(), env, err)
	}
}

// consumed runs a consumer of pool on b and returns the ids of the jobs it
// takes.
func consumed(t *testing.T, b *broker.Broker) <-chan string {
	t.Helper()
	ids := make(chan string, 16)
	c, err := b.Consume(t.Context(), wire.DefaultPool, 1, func(_ context.Context, d *broker.Delivery) {
		ids <- d.Job.ID
		_ = d.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return ids
}

func testJob() *wire.Job {
	now := time.Now().UTC()
	return &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "s-x",
		Code: "print(1)", TimeoutMS: 1000, EnqueuedAt: now, Deadline: now.Add(time.Minute)}
}

// dispatched dispatches a job and checks that it reached the pool's queue.
func dispatched(t *testing.T, f *Frontend, ids <-chan string, when string) {
	t.Helper()
	job := testJob()
	target, err := f.dispatch(t.Context(), job, nil)
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if target != "" {
		t.Fatalf("%s: sent to worker %s, not to the pool", when, target)
	}
	select {
	case id := <-ids:
		if id != job.ID {
			t.Fatalf("%s: the pool got job %s, not %s", when, id, job.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: job %s never reached the pool", when, job.ID)
	}
}

func TestDispatchWhileStoreIsDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	b := brokertest.Open(t, brokertest.StartNATS(t), broker.Config{})
	ids := consumed(t, b)
	st := openRedis(t, rs)
	cfg := Config{AnnounceWait: 300 * time.Millisecond}
	f, err := New(cfg, b, st)
	if err != nil {
		t.Fatal(err)
	}
	keys := f.cfg.Keys
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: wire.DefaultPool, Concurrency: 1})
	if err := st.Touch(t.Context(), keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	dispatched(t, f, ids, "store up")

	rs.Stop()
	dispatched(t, f, ids, "store down")

	// Back without the presence records (they expired while it was down):
	// the workers may well run, so the job goes to the pool.
	rs.Restart(t)
	if err := st.Leave(t.Context(), keys.Workers(), "w1"); err != nil {
		t.Fatal(err)
	}
	dispatched(t, f, ids, "store back, presence lost")

	// A frontend that saw no outage waits for a worker to announce itself,
	// then says so.
	fresh, err := New(cfg, b, st)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fresh.dispatch(t.Context(), testJob(), nil)
	if err == nil || !strings.Contains(err.Error(), "none has announced itself in the last 300ms") {
		t.Fatalf("an empty pool: %v", err)
	}
	patient, err := New(Config{AnnounceWait: time.Minute}, b, st)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = st.Touch(context.Background(), keys.Workers(), "w1", advert, time.Minute)
	}()
	dispatched(t, patient, ids, "a worker announcing itself while the call waits")
}

// While the store is away a session's jobs still go to the worker that
// held its working directory when this frontend last read its record, or
// saw it run one of the session's jobs, even though nobody can tell whether
// it is alive: sent to any worker, each ran on a copy of its own, and the
// first saved afterwards won, losing what the others wrote (a fault run:
// two sessions' six appends each during a 12 s outage, every call ok, none
// of them in the file afterwards). The job says which holder the frontend
// knew, for the worker (worker/workspaces.go). Once the store is back, a
// holder missing from the presence records is waited for, as its record
// may have expired with the store.
func TestWorkspaceHolderWhileStoreIsDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	ctx := t.Context()
	st := openRedis(t, rs)
	f, err := New(Config{AnnounceWait: 300 * time.Millisecond}, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(wire.Workspace{V: wire.Version, Worker: "w2", Snapshot: "j", Stored: true})
	if err := st.Set(ctx, f.cfg.Keys.Workspace("s-read"), rec, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Set(ctx, f.cfg.Keys.Workspace("s-unread"), rec, 0); err != nil {
		t.Fatal(err)
	}
	adverts := []envspec.Advert{{WorkerID: "w1", Targeted: true}, {WorkerID: "w2", Targeted: true}}
	job := func(scope string) *wire.Job { return &wire.Job{Kind: wire.KindExecute, Scope: scope} }
	check := func(when string, j *wire.Job, adverts []envspec.Advert, live bool, want, known string) {
		t.Helper()
		if got := f.workspaceHolder(ctx, j, adverts, live); got != want || j.KnownHolder != known {
			t.Errorf("%s: sent to %q knowing holder %q, want %q knowing %q", when, got, j.KnownHolder, want, known)
		}
	}
	check("store up", job("s-read"), adverts, true, "w2", "w2")
	check("store up, a session without a record", job("s-new"), adverts, true, "", wire.NoHolder)
	// A job of s-ran ran on w1: its record could not be written (here:
	// never written), and the frontend remembers w1 from the result.
	ran := job("s-ran")
	check("store up, before its first job", ran, adverts, true, "", wire.NoHolder)
	f.rememberHolder(ran, &wire.Result{Status: wire.StatusOK, WorkerID: "w1"})

	rs.Stop()
	_, _, _ = f.presenceOf(ctx) // as dispatch does: the failure is noticed
	check("store down, a session whose holder this frontend read", job("s-read"), adverts, false, "w2", "w2")
	check("store down, the holder not in the last records", job("s-read"), adverts[:1], false, "w2", "w2")
	check("store down, a session this frontend never read", job("s-unread"), adverts, false, "", "")
	check("store down, a session without files", job("s-new"), adverts, false, "", wire.NoHolder)
	check("store down, a session whose job this frontend saw run", job("s-ran"), adverts, false, "w1", "w1")
	// A worker's refusal (nothing ran) does not make it the holder.
	f.rememberHolder(job("s-read"), &wire.Result{Status: wire.StatusInternal, WorkerID: "w1"})
	check("store down, after another worker refused", job("s-read"), adverts, false, "w2", "w2")

	rs.Restart(t)
	for _, err := st.Members(ctx, f.cfg.Keys.Workers()); err != nil; _, err = st.Members(ctx, f.cfg.Keys.Workers()) {
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // the client reconnects
	}
	// Back, the presence records expired with the store: w2 is waited
	// for, and placement decides once the wait is over.
	t0 := time.Now()
	check("store back, the holder not announced", job("s-read"), adverts[:1], true, "", "w2")
	if waited := time.Since(t0); waited < 300*time.Millisecond {
		t.Errorf("a holder missing right after an outage was waited for %s, want the announce wait (300ms)", waited)
	}
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w2", Pool: wire.DefaultPool, Targeted: true})
	if err := st.Touch(ctx, f.cfg.Keys.Workers(), "w2", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	check("store back, the holder announced again", job("s-read"), adverts[:1], true, "w2", "w2")
	// No record of s-ran: right after the outage, the worker seen running
	// its job holds its files all the same.
	check("store back, a session whose record could not be written", job("s-ran"), adverts, true, "w1", "w1")
}

// A job sent to the holder while the store is away, whose holder is gone,
// goes to the pool within a target check or two, where a worker that
// cannot read the session's record refuses it (worker/workspaces.go):
// nobody could tell that the holder was gone, and the call used to wait
// for its deadline.
func TestDeadHolderWhileStoreIsDown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	b := brokertest.Open(t, brokertest.StartNATS(t), broker.Config{})
	ids := consumed(t, b)
	st := openRedis(t, rs)
	f, err := New(Config{TargetCheck: 100 * time.Millisecond}, b, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w-gone", Pool: wire.DefaultPool, Targeted: true, Concurrency: 1})
	if err := st.Touch(ctx, f.cfg.Keys.Workers(), "w-gone", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec, _ := json.Marshal(wire.Workspace{V: wire.Version, Worker: "w-gone", Snapshot: "j", Stored: true})
	if err := st.Set(ctx, f.cfg.Keys.Workspace("s-x"), rec, 0); err != nil {
		t.Fatal(err)
	}
	if got := f.workspaceHolder(ctx, testJob(), nil, true); got != "" {
		t.Fatalf("store up: sent to %q, want placement", got) // (no adverts given)
	}

	rs.Stop()
	job := testJob()
	target, err := f.dispatch(ctx, job, nil)
	if err != nil || target != "w-gone" || job.KnownHolder != "w-gone" {
		t.Fatalf("store down: sent to %q knowing %q (%v), want the holder w-gone", target, job.KnownHolder, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() { _, _ = f.awaitResult(wctx, job, target) }()
	select {
	case id := <-ids:
		if id != job.ID {
			t.Fatalf("the pool got job %s, not %s", id, job.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the job of a holder that nobody serves never reached the pool")
	}
}
