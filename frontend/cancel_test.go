package frontend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// CancelJob marks the scope's own job, says a finished job is done and
// leaves its result, and treats another scope's job as an unknown one.
func TestCancelJobScoped(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	ctx := t.Context()

	queued := putRecord(t, jb.b, "scope-a", time.Now().Add(time.Minute))
	if _, err := jb.f.CancelJob(ctx, "scope-b", queued); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("another scope cancelled the job: %v", err)
	}
	if marked, _ := jb.b.JobCancelled(ctx, queued); marked {
		t.Fatal("another scope's cancel left a mark")
	}
	if _, err := jb.f.CancelJob(ctx, "scope-a", ulid.Make().String()); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("an unknown job: %v", err)
	}
	done, err := jb.f.CancelJob(ctx, "scope-a", queued)
	if err != nil || done {
		t.Fatalf("CancelJob = done %v, %v", done, err)
	}
	if marked, err := jb.b.JobCancelled(ctx, queued); !marked || err != nil {
		t.Fatalf("no cancel mark: %v %v", marked, err)
	}

	finished := putRecord(t, jb.b, "scope-a", time.Now().Add(time.Minute))
	if _, err := jb.b.PutResult(ctx, &wire.Result{JobID: finished, Scope: "scope-a", Status: wire.StatusOK, Stdout: "kept\n"}); err != nil {
		t.Fatal(err)
	}
	if done, err := jb.f.CancelJob(ctx, "scope-a", finished); err != nil || !done {
		t.Fatalf("CancelJob of a finished job = done %v, %v", done, err)
	}
	if res, err := jb.b.GetResult(ctx, finished); err != nil || res.Stdout != "kept\n" {
		t.Fatalf("the finished job's result: %+v %v", res, err)
	}
}

// A call cancelled while NATS is away cancels its job once NATS is back:
// the mark that could not be written is tried again while the job may
// run. The first failure used to be the end of it, and the job ran to its
// end for a caller that had cancelled it.
func TestCancelWrittenOnceNATSIsBack(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	e := brokertest.StartNATSWith(t, broker.EmbeddedConfig{Port: port, StoreDir: dir})
	b := brokertest.Open(t, e, broker.Config{URL: fmt.Sprintf("nats://127.0.0.1:%d", port)})
	f := boltFrontend(t, b)

	job := &wire.Job{ID: ulid.Make().String(), Scope: "scope-a", Deadline: time.Now().Add(time.Minute), TimeoutMS: 10000}
	e.Shutdown()
	call, cancel := context.WithCancel(context.Background())
	cancel() // the caller sent notifications/cancelled
	if f.cancelAbandoned(call, job) {
		t.Fatal("cancelAbandoned wrote a mark while NATS was away")
	}
	brokertest.StartNATSWith(t, broker.EmbeddedConfig{Port: port, StoreDir: dir})
	ctx, done := context.WithTimeout(t.Context(), 30*time.Second)
	defer done()
	for {
		if marked, _ := b.JobCancelled(ctx, job.ID); marked {
			return
		}
		if ctx.Err() != nil {
			t.Fatal("the job of the call cancelled while NATS was away was never marked cancelled")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A cancel mark tried again in the background stops once the frontend's
// broker is closed. It used to try on until the job's deadline, a goroutine
// spending a second's tick for minutes after its frontend was gone.
func TestCancelLaterEndsWhenTheBrokerCloses(t *testing.T) {
	t.Parallel()
	e := brokertest.StartNATS(t)
	b := brokertest.Open(t, e, broker.Config{})
	f := boltFrontend(t, b)
	job := &wire.Job{ID: ulid.Make().String(), Scope: "scope-a", Deadline: time.Now().Add(time.Hour), TimeoutMS: 10000}
	e.Shutdown()
	call, cancel := context.WithCancel(context.Background())
	cancel()
	if f.cancelAbandoned(call, job) {
		t.Fatal("cancelAbandoned wrote a mark while NATS was away")
	}
	b.Close()
	done := make(chan struct{})
	go func() { f.cancelsLater.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the background cancel still runs 20 s after its broker was closed")
	}
}

// boltFrontend is a frontend on b with a state store of its own.
func boltFrontend(t *testing.T, b *broker.Broker) *Frontend {
	t.Helper()
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f, err := New(Config{}, b, st)
	if err != nil {
		t.Fatal(err)
	}
	return f
}
