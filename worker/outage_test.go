package worker

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/wire"
)

// msgHandler is a slog handler that sends every record's message on a
// channel (dropping them when nobody reads).
type msgHandler struct{ msgs chan string }

func (h msgHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h msgHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.msgs <- r.Message:
	default:
	}
	return nil
}
func (h msgHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h msgHandler) WithGroup(string) slog.Handler      { return h }

// A worker whose state store goes away keeps running the jobs of its
// queue (their claims are made in JetStream; the Claimants record waits
// for the store: claim.go), and once the store is back announces itself
// again at once, rather than a whole heartbeat interval after its last
// failed renewal (Redis outages longer than the presence records' life
// used to leave frontends without any live worker until then).
func TestWorkerThroughStoreOutage(t *testing.T) {
	fx := newLifecycleFixture(t)
	rs := redistest.Start(t)
	st, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{URL: rs.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	b := brokertest.Open(t, fx.nats, broker.Config{})
	logs := msgHandler{msgs: make(chan string, 1024)}
	const interval = 6 * time.Second
	w, err := New(Config{
		ID: "outage", DataDir: fx.dataDir, ExecMode: ExecSpawn, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, HeartbeatInterval: interval, Logger: slog.New(logs),
	}, b, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	rs.Stop()
	waitMsg(t, ctx, logs.msgs, "heartbeat failed")
	// Jobs still reach the worker through the queue, and run.
	job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "outage",
		Code: "print('still here')", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC()}
	if err := b.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	// Well before the test's end, so that a job held until the store is
	// back fails here rather than hanging.
	dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
	defer dcancel()
	res, err := b.WaitResult(dctx, job.ID)
	if err != nil || res.Status != wire.StatusOK || res.Stdout != "still here\n" {
		t.Fatalf("a job while the store is down: %+v %v", res, err)
	}

	// The store comes back without the record (it expired meanwhile).
	rs.Restart(t)
	if err := st.Leave(ctx, w.cfg.Keys.Workers(), w.ID()); err != nil {
		t.Fatal(err)
	}
	// Before the next regular heartbeat (interval after the failed one).
	wctx, wcancel := context.WithTimeout(ctx, interval/2)
	defer wcancel()
	for {
		members, err := st.Members(wctx, w.cfg.Keys.Workers())
		if err == nil {
			if _, ok := members[w.ID()]; ok {
				break
			}
		}
		select {
		case <-wctx.Done():
			t.Fatalf("presence not back within %s of the store's return (heartbeat every %s)", interval/2, interval)
		case <-time.After(50 * time.Millisecond):
		}
	}
	waitMsg(t, ctx, logs.msgs, "heartbeat restored: presence announced again")
}

// waitMsg waits for a log record with message msg.
func waitMsg(t *testing.T, ctx context.Context, msgs <-chan string, msg string) {
	t.Helper()
	for {
		select {
		case m := <-msgs:
			if strings.HasPrefix(m, msg) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no log %q", msg)
		}
	}
}
