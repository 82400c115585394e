package worker

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/internal/lifecycle"
	"github.com/codexec/codexec/internal/lifecycle/lifecycletest"
	"github.com/codexec/codexec/statestore"
	"go.uber.org/goleak"
)

// The worker keeps the lifecycle contract in both exec modes, with a
// failure injected after its sandbox, interpreters and environment cache
// are open (lifecycleFixture.worker).
//
// Not parallel: lifecycletest.Check compares the process's goroutines and
// children before and after.
func TestWorkerLifecycle(t *testing.T) {
	fx := newLifecycleFixture(t)
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		for _, inject := range []string{"closed store", "closed broker"} {
			t.Run(mode+"/"+inject, func(t *testing.T) {
				lifecycletest.Check(t, func(t *testing.T, fail bool) lifecycle.Service {
					return fx.worker(t, mode, inject, fail)
				}, lifecycletest.Options{IgnoreGoroutines: serverConsumerGoroutines})
			})
		}
	}
	// The presence of the stopped workers is withdrawn.
	members, err := fx.store.Members(context.Background(), Config{}.WithDefaults().Keys.Workers())
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 0 {
		t.Errorf("stopped workers still present: %v", members)
	}
}

// A Start that fails has released what it opened by the time it returns,
// before any Stop: no goroutine, no interpreter, no presence record.
func TestWorkerFailedStartCleansUp(t *testing.T) {
	fx := newLifecycleFixture(t)
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		for _, inject := range []string{"closed store", "closed broker"} {
			t.Run(mode+"/"+inject, func(t *testing.T) {
				w := fx.worker(t, mode, inject, true)
				ignore := []goleak.Option{goleak.IgnoreCurrent()}
				for _, f := range serverConsumerGoroutines {
					ignore = append(ignore, goleak.IgnoreTopFunction(f))
				}
				before := lifecycletest.Descendants()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := w.Start(ctx); err == nil {
					t.Fatal("Start succeeded although a failure was injected")
				}
				if err := goleak.Find(ignore...); err != nil {
					t.Errorf("goroutines left behind by a failed Start: %v", err)
				}
				for pid, cmd := range lifecycletest.Descendants() {
					if _, ok := before[pid]; !ok {
						t.Errorf("process left behind by a failed Start: %d %s", pid, cmd)
					}
				}
				members, err := fx.store.Members(context.Background(), w.cfg.Keys.Workers())
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := members[w.ID()]; ok {
					t.Errorf("a failed Start left the worker's presence announced")
				}
				if err := w.Stop(ctx); err != nil {
					t.Errorf("Stop after a failed Start: %v", err)
				}
			})
		}
	}
}

// lifecycleFixture is what the workers of the lifecycle tests share: a
// NATS server and broker, a state store and a data directory (the default
// venv is built once, and a case that left the cache locked would fail
// the next).
type lifecycleFixture struct {
	nats    *broker.Embedded
	broker  *broker.Broker
	store   *statestore.BoltStore
	dataDir string
}

func newLifecycleFixture(t *testing.T) *lifecycleFixture {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs python3: %v", err)
		}
		t.Skipf("no python3 for the default environment: %v", err)
	}
	e := brokertest.StartNATS(t)
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &lifecycleFixture{nats: e, broker: brokertest.Open(t, e, broker.Config{}), store: st, dataDir: t.TempDir()}
}

// worker makes a worker in mode; with fail, its inject ("closed store" or
// "closed broker") makes its Start fail once the sandbox, interpreters and
// cache are open: a closed store fails the first heartbeat, a closed
// broker lets the heartbeat through and fails the consumer.
func (fx *lifecycleFixture) worker(t *testing.T, mode, inject string, fail bool) *Worker {
	t.Helper()
	cfg := Config{
		ID: "lifecycle-" + mode, DataDir: fx.dataDir, ExecMode: mode, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}
	b, st := fx.broker, statestore.Store(fx.store)
	if fail && inject == "closed store" {
		closed, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "closed.db"))
		if err != nil {
			t.Fatal(err)
		}
		_ = closed.Close()
		st = closed
	}
	if fail && inject == "closed broker" {
		b = brokertest.Open(t, fx.nats, broker.Config{})
		b.Close()
	}
	w, err := New(cfg, b, st)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// serverConsumerGoroutines belong to the test's NATS server, not to the
// worker: the consumers a worker pulls from are the server's, and outlive
// the worker by design (the pool's is durable, the worker's own is deleted
// by the server once unused for a while).
var serverConsumerGoroutines = []string{
	"github.com/nats-io/nats-server/v2/server.(*consumer).loopAndGatherMsgs",
	"github.com/nats-io/nats-server/v2/server.(*consumer).processInboundAcks",
	"github.com/nats-io/nats-server/v2/server.(*consumer).processInboundNextMsgReqs",
	"github.com/nats-io/nats-server/v2/server.(*consumerFileStore).flushLoop",
}
