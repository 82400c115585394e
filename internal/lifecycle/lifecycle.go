// Package lifecycle states the one start/stop contract that every
// long-lived component of codexec keeps: the worker, the broker's
// consumers, the zygote pool, the fresh-interpreter runner, the environment
// cache and the embedded NATS server.
//
// The contract:
//
//   - Start(ctx) begins the component's work and returns once it is ready,
//     or with an error. A Start that fails has released everything it had
//     opened before it returns: no goroutine, child process, open file or
//     lock of the component is left behind.
//   - Stop(ctx) ends the work: it stops taking new work, lets what runs
//     finish until ctx ends, then cancels what is left, and returns when
//     every goroutine and child process of the component is gone.
//   - Stop is idempotent and safe in every state: before Start, after a
//     failed Start, after a successful one, twice, and concurrently with
//     itself. Every call after the first returns nil at once, or waits for
//     the first to finish.
//   - Start is called at most once; a stopped component is not restarted
//     (make a new one).
//
// lifecycletest.Check verifies the contract for a component, with failure
// injected into its Start, and looks for leaked goroutines and processes.
package lifecycle

import "context"

// Service is a component that keeps the contract above.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Wait returns nil once done is closed, or ctx's error if ctx ends first.
// It is how a Stop after the first waits for the first: done is closed when
// the first Stop returns.
func Wait(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
