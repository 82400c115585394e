package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
)

// A frontend publishes a job and waits for its result; a worker consumes
// the pool's jobs and stores results. Both roles share one embedded server
// here, as in `codexec dev`.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)

	dir, err := os.MkdirTemp("", "codexec-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	e, err := broker.StartEmbedded(broker.EmbeddedConfig{StoreDir: dir, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer e.Shutdown()
	b, err := broker.Open(ctx, broker.Config{ConnectOptions: []nats.Option{e.ConnectOption()}, Logger: quiet})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	// Worker side.
	c, err := b.Consume(ctx, wire.DefaultPool, 4, func(ctx context.Context, d *broker.Delivery) {
		r := &wire.Result{JobID: d.Job.ID, Status: wire.StatusOK, Stdout: "hello\n", Attempt: d.Attempt}
		if _, err := b.PutResult(ctx, r); err != nil {
			_ = d.Nak(time.Second)
			return
		}
		_ = d.Ack()
	})
	if err != nil {
		panic(err)
	}
	defer func() { _ = c.Stop(ctx) }()

	// Frontend side.
	job := &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool,
		Scope: "s1", Code: `print("hello")`, TimeoutMS: 5000}
	if err := b.PublishJob(ctx, job); err != nil {
		panic(err)
	}
	r, err := b.WaitResult(ctx, job.ID)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s attempt %d: %s", r.Status, r.Attempt, r.Stdout)
	// Output: ok attempt 1: hello
}
