package broker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// While a clustered stream elects a new leader, nobody answers its
// requests. Deleting a stream and defining it again a moment later is the
// same to a client, on one in-process server: these tests do that.

// reopenAfter opens a second broker on the same server after d, which
// defines the stream and buckets again. The function it returns waits
// until that broker is open.
func reopenAfter(t *testing.T, tb *testBundle, d time.Duration) (wait func()) {
	t.Helper()
	done := make(chan error, 1)
	timer := time.AfterFunc(d, func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		b, err := broker.Open(ctx, broker.Config{ConnectOptions: []nats.Option{tb.e.ConnectOption()}, Name: "reopen"})
		if err == nil {
			b.Close()
		}
		done <- err
	})
	var once sync.Once
	wait = func() {
		once.Do(func() {
			if err := <-done; err != nil {
				t.Errorf("reopen: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		if !timer.Stop() {
			wait()
		}
	})
	return wait
}

// PublishJob rides out a jobs stream without a leader: it tries again until
// the stream answers, for longer than a leader election takes.
func TestPublishJobRetriesWhileStreamHasNoLeader(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	if err := tb.js.DeleteStream(ctx, wire.JobsStream); err != nil {
		t.Fatal(err)
	}
	reopened := reopenAfter(t, tb, 1500*time.Millisecond)
	job := newJob("print(1)")
	if err := tb.b.PublishJob(ctx, job); err != nil {
		t.Fatalf("publish while the stream had no leader: %v", err)
	}
	// The server takes messages for a new stream a moment before it
	// answers for it by name: look it up once the stream is defined.
	reopened()
	s, err := tb.js.Stream(ctx, wire.JobsStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, wire.JobSubject(wire.DefaultPool)); err != nil {
		t.Fatalf("the job is not in the stream: %v", err)
	}
}

// WaitResult keeps waiting through a results bucket without a leader, and
// returns the result stored once it answers again.
func TestWaitResultRidesOutBucketWithoutLeader(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	if err := tb.js.DeleteStream(ctx, "KV_"+wire.ResultsBucket); err != nil {
		t.Fatal(err)
	}
	jobID := newJob("").ID
	reopenAfter(t, tb, 500*time.Millisecond)
	put := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		_, err := tb.b.PutResult(ctx, newResult(jobID, "late\n"))
		put <- err
	}()
	r, err := tb.b.WaitResult(ctx, jobID)
	if err != nil || r.Stdout != "late\n" {
		t.Fatalf("WaitResult through a bucket without a leader: %+v %v", r, err)
	}
	// WaitResult may return once the result is stored, before PutResult
	// has its acknowledgement: wait for it before the test's context ends.
	if err := <-put; err != nil {
		t.Errorf("PutResult: %v", err)
	}
}
