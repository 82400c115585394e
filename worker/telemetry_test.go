package worker

import (
	"context"
	"testing"
	"time"

	"github.com/codexec/codexec/internal/telemetry"
)

// TestReadyOnceStartedAndWarm: a worker watched by a probe is not ready
// before Start (check "worker" failing, NATS and the store answering),
// and is once Start has returned and its default environment's warm
// interpreter has finished starting; the probe then counts it alive. Once
// stopped, it is not ready again.
func TestReadyOnceStartedAndWarm(t *testing.T) {
	fx := newLifecycleFixture(t)
	w := fx.worker(t, ExecZygote, "", false)
	p := telemetry.NewProbe(nil)
	w.Watch(p)
	failing := p.Failing(t.Context())
	if _, ok := failing["worker"]; !ok || len(failing) != 1 {
		t.Fatalf("before Start: failing %v, want the worker check alone", failing)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		time.Sleep(1100 * time.Millisecond) // past the probe's one-second cache
		if failing = p.Failing(t.Context()); len(failing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Start: still failing %v", failing)
		}
	}
	if w.zygotesAlive() < 1 {
		t.Errorf("ready with %d warm interpreters alive, want the default one", w.zygotesAlive())
	}
	stop()
	time.Sleep(1100 * time.Millisecond)
	if _, ok := p.Failing(t.Context())["worker"]; !ok {
		t.Error("stopped, and the worker check passes")
	}
}
