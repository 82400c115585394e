package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// startRevokeWorker starts a spawn-mode worker of two slots on fx's broker
// and st.
func startRevokeWorker(ctx context.Context, t *testing.T, fx *lifecycleFixture, st statestore.Store, id string) *Worker {
	t.Helper()
	w, err := New(Config{
		ID: id, DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 2, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
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

// revokeJob is a job of tenant/principal in scope running code.
func revokeJob(tenant, principal, scope, code string) *wire.Job {
	return &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
		Tenant: tenant, Principal: principal, Code: code, Filename: "main.py",
		TimeoutMS: 110000, Deadline: time.Now().Add(time.Minute).UTC(),
	}
}

// revokeStores are the state stores a revocation is read from: the
// embedded one and a real redis-server.
func revokeStores(ctx context.Context, t *testing.T) map[string]statestore.Store {
	t.Helper()
	bolt, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bolt.Close() })
	rs := redistest.Start(t)
	redis, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = redis.Close() })
	return map[string]statestore.Store{"bolt": bolt, "redis": redis}
}

// A batch row of tenant acme that runs (a child process that would sleep
// for ten minutes, and no caller waiting for it) is stopped with its
// processes once the operator revokes acme, and its result says why;
// tenant other's job, running beside it, runs to its end.
func TestRevokedTenantsRunningJobStops(t *testing.T) {
	for name, st := range revokeStores(context.Background(), t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			fx := newLifecycleFixture(t)
			startRevokeWorker(ctx, t, fx, st, "revoke-running-"+name)
			marker := "codexec-revoke-" + ulid.Make().String()
			doomed := revokeJob("acme", "bob", "revoke-acme", fmt.Sprintf("import subprocess, sys, time\n"+
				"print('started', flush=True)\n"+
				"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', %q])\ntime.sleep(600)\n", marker))
			doomed.Batch = "acme-batch"
			for _, err := range fx.broker.SubmitJobs(ctx, []*wire.Job{doomed}) {
				if err != nil {
					t.Fatal(err)
				}
			}
			otherMarker := "codexec-revoke-other-" + ulid.Make().String()
			other := revokeJob("other", "carol", "revoke-other", fmt.Sprintf("import subprocess, sys\n"+
				"print('started', flush=True)\n"+
				"subprocess.run([sys.executable, '-c', 'import time; time.sleep(3)', %q])\nprint('done')\n", otherMarker))
			if err := fx.broker.PublishJob(ctx, other); err != nil {
				t.Fatal(err)
			}
			waitProcs(ctx, t, marker, true)
			waitProcs(ctx, t, otherMarker, true)
			if err := st.HSet(ctx, revokeKeys.Revoked(), statestore.RevokedField("acme", ""), []byte("2026-12-03T17:00:00Z")); err != nil {
				t.Fatal(err)
			}
			res, err := fx.broker.WaitResult(ctx, doomed.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != wire.StatusCancelled || res.Stdout != "started\n" || !strings.Contains(res.Message, "revoked by the operator") {
				t.Errorf("revoked tenant's job: %s %q %q, want cancelled with the output so far and why", res.Status, res.Stdout, res.Message)
			}
			waitProcs(ctx, t, marker, false)
			res, err = fx.broker.WaitResult(ctx, other.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != wire.StatusOK || res.Stdout != "started\ndone\n" {
				t.Errorf("other tenant's job: %s %q %q, want ok to its end", res.Status, res.Stdout, res.Message)
			}
		})
	}
}

// A job of a revoked principal that waited in the queue is not run when a
// worker takes it: its result says the credentials were revoked, and it is
// acked, not delivered again. Another principal of the tenant runs. Once
// the revocation is lifted, the principal's jobs run again.
func TestRevokedPrincipalsQueuedJobRefused(t *testing.T) {
	for name, st := range revokeStores(context.Background(), t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			fx := newLifecycleFixture(t)
			field := statestore.RevokedField("acme", "bob")
			if err := st.HSet(ctx, revokeKeys.Revoked(), field, []byte("2026-12-03T17:00:00Z")); err != nil {
				t.Fatal(err)
			}
			bob := revokeJob("acme", "bob", "revoke-bob", "print('ran')")
			alice := revokeJob("acme", "alice", "revoke-alice", "print('ran')")
			for _, job := range []*wire.Job{bob, alice} {
				if err := fx.broker.PublishJob(ctx, job); err != nil {
					t.Fatal(err)
				}
			}
			// The worker starts only now: the jobs have waited in the queue.
			w := startRevokeWorker(ctx, t, fx, st, "revoke-queued-"+name)
			res, err := fx.broker.WaitResult(ctx, bob.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status == wire.StatusOK || res.Stdout != "" || !strings.Contains(res.Message, "revoked by the operator") {
				t.Errorf("revoked principal's queued job: %s %q %q, want refused without running", res.Status, res.Stdout, res.Message)
			}
			if res, err := fx.broker.WaitResult(ctx, alice.ID); err != nil || res.Status != wire.StatusOK {
				t.Errorf("another principal's job: %+v %v, want ok", res, err)
			}
			waitQueueAcked(ctx, t, fx)

			if err := st.HDel(ctx, revokeKeys.Revoked(), field); err != nil {
				t.Fatal(err)
			}
			waitRevocationsRead(ctx, t, w, "acme", "bob", false)
			again := revokeJob("acme", "bob", "revoke-bob", "print('ran')")
			if err := fx.broker.PublishJob(ctx, again); err != nil {
				t.Fatal(err)
			}
			if res, err := fx.broker.WaitResult(ctx, again.ID); err != nil || res.Status != wire.StatusOK || res.Stdout != "ran\n" {
				t.Errorf("job after the revocation was lifted: %+v %v, want ok", res, err)
			}
		})
	}
}

// revokeKeys are the workers' state-store keys (the default prefix).
var revokeKeys = Config{}.WithDefaults().Keys

// waitQueueAcked waits until no job of the default pool waits in the
// queue or for its ack.
func waitQueueAcked(ctx context.Context, t *testing.T, fx *lifecycleFixture) {
	t.Helper()
	for {
		waiting, unacked, err := fx.broker.QueueDepth(ctx, wire.DefaultPool)
		if err == nil && waiting == 0 && unacked == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("queue: %d waiting, %d unacked (%v), want every job acked", waiting, unacked, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitRevocationsRead waits until w's copy of the revocations says
// whether principal of tenant is revoked as want.
func waitRevocationsRead(ctx context.Context, t *testing.T, w *Worker, tenant, principal string, want bool) {
	t.Helper()
	for {
		w.revocations.mu.Lock()
		_, revoked := w.revocations.revoked.Match(tenant, principal)
		w.revocations.mu.Unlock()
		if revoked == want {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the worker never read that %s/%s revoked=%v", tenant, principal, want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// The contexts of a revoked tenant end on the worker that holds them: a
// call running in one is stopped and its reply says why, an idle one is
// ended and its next call is told why; another tenant's context goes on
// with its variables.
func TestRevokedTenantsContextsEnd(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := startContextWorker(t, fx, "revoke-contexts", 4, time.Hour)
	b := fx.broker
	create := func(id, tenant string) {
		r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextCreate, Scope: "s-" + tenant, ID: id, Tenant: tenant, Principal: "bob"})
		if r.Result.Status != wire.StatusOK {
			t.Fatalf("create %s: %+v", id, r.Result)
		}
	}
	create("busy", "acme")
	create("idle", "acme")
	create("kept", "other")
	if r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextRun, Scope: "s-other", ID: "kept", Tenant: "other", Principal: "bob", Code: "x = 7", TimeoutMS: 60000}); r.Result.Status != wire.StatusOK {
		t.Fatalf("run in kept: %+v", r.Result)
	}
	marker := "codexec-revoke-ctx-" + ulid.Make().String()
	replies := make(chan *wire.ContextReply, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextRun, Scope: "s-acme", ID: "busy", Tenant: "acme", Principal: "bob",
			Code: fmt.Sprintf("import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import time; time.sleep(600)', %q])", marker), TimeoutMS: 600_000})
		out, err := b.RequestContext(ctx, w.cfg.Pool, w.ID(), data)
		var r wire.ContextReply
		if err != nil || json.Unmarshal(out, &r) != nil || r.Result == nil {
			t.Errorf("the running call: %v %q", err, out)
		}
		replies <- &r
	}()
	waitProcs(ctx, t, marker, true)
	if err := fx.store.HSet(ctx, revokeKeys.Revoked(), statestore.RevokedField("acme", ""), []byte("2026-12-03T17:00:00Z")); err != nil {
		t.Fatal(err)
	}
	var r *wire.ContextReply
	select {
	case r = <-replies:
	case <-ctx.Done():
		t.Fatal("the call in the revoked tenant's context was never stopped")
	}
	if r.Result == nil || r.Result.Status != wire.StatusCancelled || !strings.Contains(r.Ended, "revoked by the operator") {
		t.Errorf("the running call: %+v (ended %q), want cancelled and the context ended for the revocation", r.Result, r.Ended)
	}
	for {
		w.contexts.mu.Lock()
		_, live := w.contexts.live[contextKey("s-acme", "idle")]
		w.contexts.mu.Unlock()
		if !live {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the revoked tenant's idle context never ended")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextRun, Scope: "s-acme", ID: "idle", Tenant: "acme", Principal: "bob", Code: "1", TimeoutMS: 60000}); !strings.Contains(r.Ended, "revoked by the operator") {
		t.Errorf("a call in the ended idle context: %+v (ended %q), want told of the revocation", r.Result, r.Ended)
	}
	if r := ctxCall(t, b, w, wire.ContextRequest{Op: wire.ContextRun, Scope: "s-other", ID: "kept", Tenant: "other", Principal: "bob", Code: "print(x)", TimeoutMS: 60000}); r.Result.Stdout != "7\n" {
		t.Errorf("the other tenant's context: %+v, want its variables kept", r.Result)
	}
}

// A frontend cancels the jobs its calls wait for of a revoked identity,
// which may be before this worker's own read of the revocations: the
// result of such a job says the credentials were revoked, not that its
// caller cancelled it (it said so, and a revoked caller was told it had
// cancelled its own call).
func TestJobCancelledForARevocationSaysRevoked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	fx := newLifecycleFixture(t)
	startRevokeWorker(ctx, t, fx, st, "revoke-cancelled")
	marker := "codexec-revoke-cancel-" + ulid.Make().String()
	job := revokeJob("acme", "bob", "revoke-cancel", fmt.Sprintf("import subprocess, sys, time\n"+
		"print('started', flush=True)\n"+
		"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', %q])\ntime.sleep(600)\n", marker))
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	waitProcs(ctx, t, marker, true)
	// What a frontend does: it reads the revocation, then cancels the job.
	if err := st.HSet(ctx, revokeKeys.Revoked(), statestore.RevokedField("acme", "bob"), []byte("2026-12-04T23:00:00Z")); err != nil {
		t.Fatal(err)
	}
	if err := fx.broker.CancelJob(ctx, job.ID); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusCancelled || !strings.Contains(res.Message, "revoked by the operator") {
		t.Errorf("result %s %q, want cancelled, saying the credentials were revoked", res.Status, res.Message)
	}
	waitProcs(ctx, t, marker, false)

	// A job cancelled by its caller, of an identity nobody revoked, says so.
	marker = "codexec-revoke-cancel-own-" + ulid.Make().String()
	own := revokeJob("acme", "alice", "revoke-cancel-own", fmt.Sprintf("import subprocess, sys, time\n"+
		"print('started', flush=True)\n"+
		"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', %q])\ntime.sleep(600)\n", marker))
	if err := fx.broker.PublishJob(ctx, own); err != nil {
		t.Fatal(err)
	}
	waitProcs(ctx, t, marker, true)
	if err := fx.broker.CancelJob(ctx, own.ID); err != nil {
		t.Fatal(err)
	}
	if res, err = fx.broker.WaitResult(ctx, own.ID); err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusCancelled || !strings.Contains(res.Message, "cancelled by its caller") {
		t.Errorf("own cancel: %s %q", res.Status, res.Message)
	}
	waitProcs(ctx, t, marker, false)
}
