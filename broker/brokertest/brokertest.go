// Package brokertest starts real in-process NATS JetStream servers and
// brokers for tests, in this package and in every package that talks to
// the broker. Each test gets its own server, store directory and random
// port, so tests run in parallel; everything is shut down in t.Cleanup.
//
//	func TestX(t *testing.T) {
//		t.Parallel()
//		e := brokertest.StartNATS(t)
//		b := brokertest.Open(t, e, broker.Config{AckWait: time.Second})
//		...
//	}
package brokertest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/codexec/codexec/broker"
)

// openTimeout bounds Open's connection and setup.
const openTimeout = 30 * time.Second

// StartNATS starts an embedded NATS server with JetStream on a random
// TCP port (see Embedded.ClientURL) with its store in t.TempDir(), and shuts
// it down in t.Cleanup. Its logs are discarded.
func StartNATS(t testing.TB) *broker.Embedded {
	t.Helper()
	return StartNATSWith(t, broker.EmbeddedConfig{Port: -1})
}

// StartNATSWith is StartNATS with a configuration of the caller's:
// StoreDir defaults to t.TempDir() (pass the same directory to two servers
// in turn to test a restart), Logger to a discarding one. Port 0 means
// in-process only, as in broker.EmbeddedConfig.
func StartNATSWith(t testing.TB, cfg broker.EmbeddedConfig) *broker.Embedded {
	t.Helper()
	if cfg.StoreDir == "" {
		cfg.StoreDir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := broker.StartEmbedded(cfg)
	if err != nil {
		t.Fatalf("brokertest: start NATS: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// Open opens a broker on e and closes it in t.Cleanup (before e shuts
// down). It connects in-process unless cfg.URL is set; cfg.Name defaults to
// the test's name and cfg.Logger to a discarding logger.
func Open(t testing.TB, e *broker.Embedded, cfg broker.Config) *broker.Broker {
	t.Helper()
	if cfg.URL == "" {
		cfg.ConnectOptions = append(append([]nats.Option(nil), cfg.ConnectOptions...), e.ConnectOption())
	}
	if cfg.Name == "" {
		cfg.Name = t.Name()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(context.Background(), openTimeout)
	defer cancel()
	b, err := broker.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("brokertest: open broker: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}
