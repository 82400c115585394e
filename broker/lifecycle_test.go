package broker_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
	"github.com/codexec/codexec/internal/lifecycle"
	"github.com/codexec/codexec/internal/lifecycle/lifecycletest"
	"github.com/codexec/codexec/wire"
)

// Not parallel, as none of these: Check compares the process's goroutines
// before and after.
func TestEmbeddedLifecycle(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for name, inject := range map[string]func(t *testing.T, cfg *broker.EmbeddedConfig){
		// JetStream opens its store, then the listener fails.
		"port taken": func(t *testing.T, cfg *broker.EmbeddedConfig) {
			cfg.Port = taken.Addr().(*net.TCPAddr).Port
		},
		"store not writable": func(t *testing.T, cfg *broker.EmbeddedConfig) {
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg.StoreDir = filepath.Join(file, "jetstream")
		},
	} {
		t.Run(name, func(t *testing.T) {
			lifecycletest.Check(t, func(t *testing.T, fail bool) lifecycle.Service {
				cfg := broker.EmbeddedConfig{StoreDir: t.TempDir(), Port: -1, Logger: slog.New(slog.DiscardHandler)}
				if fail {
					inject(t, &cfg)
				}
				e, err := broker.NewEmbedded(cfg)
				if err != nil {
					t.Fatal(err)
				}
				return e
			}, lifecycletest.Options{})
		})
	}
}

func TestConsumerLifecycle(t *testing.T) {
	e := brokertest.StartNATSWith(t, broker.EmbeddedConfig{})
	b := brokertest.Open(t, e, broker.Config{})
	closed := brokertest.Open(t, e, broker.Config{Name: "closed"})
	closed.Close()
	ctx := testCtx(t)
	// The durable consumer, once made, lives on in the server (a fixture
	// of the test, not part of a Consumer): make it before Check looks.
	warm, err := b.Consume(ctx, wire.DefaultPool, 1, func(context.Context, *broker.Delivery) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	lifecycletest.Check(t, func(t *testing.T, fail bool) lifecycle.Service {
		on := b
		if fail {
			on = closed // the connection is closed
		}
		c, err := on.NewConsumer(wire.DefaultPool, 2, func(context.Context, *broker.Delivery) {})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}, lifecycletest.Options{})
}
