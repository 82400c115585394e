package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/nats-io/nats.go"
)

// Contexts travel as plain NATS requests on a worker's context subject
// (wire.ContextSubject), outside JetStream: see wire/context.go.

// ErrNoResponder says no worker serves the subject a context request went
// to: the worker that held the context is gone (or never served contexts).
var ErrNoResponder = errors.New("broker: no worker answers on that subject")

// ServeContexts calls handle with each request on worker's context subject,
// in a goroutine of its own, and sends back what it returns. stop ends the
// subscription; requests already taken finish.
func (b *Broker) ServeContexts(pool, worker string, handle func(data []byte) []byte) (stop func(), err error) {
	sub, err := b.nc.Subscribe(wire.ContextSubject(pool, worker), func(m *nats.Msg) {
		go func() {
			if reply := handle(m.Data); reply != nil && m.Reply != "" {
				_ = m.Respond(reply)
			}
		}()
	})
	if err != nil {
		return nil, fmt.Errorf("broker: serve contexts: %w", err)
	}
	// Subscribed on the server before the worker says it serves.
	if err := b.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("broker: serve contexts: %w", err)
	}
	return func() { _ = sub.Drain() }, nil
}

// RequestContext sends data to worker's context subject and returns the
// answer, waiting until ctx ends. ErrNoResponder: nobody serves it.
func (b *Broker) RequestContext(ctx context.Context, pool, worker string, data []byte) ([]byte, error) {
	m, err := b.nc.RequestWithContext(ctx, wire.ContextSubject(pool, worker), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, ErrNoResponder
	}
	if err != nil {
		return nil, fmt.Errorf("broker: context request: %w", err)
	}
	return m.Data, nil
}

// WorkerAnswers says whether worker of pool serves its context subject now,
// by a ping request (wire.ContextPing) waiting at most wait: false only
// when nobody serves it (the worker is gone, or stopping); a request that
// is answered late, or fails otherwise, counts as an answer, so that a slow
// worker is not taken for a dead one.
func (b *Broker) WorkerAnswers(ctx context.Context, pool, worker string, wait time.Duration) bool {
	data, _ := json.Marshal(wire.ContextRequest{V: wire.Version, Op: wire.ContextPing})
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err := b.RequestContext(ctx, pool, worker, data)
	return !errors.Is(err, ErrNoResponder)
}
