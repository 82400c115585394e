package brokertest_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestStartAndOpen(t *testing.T) {
	t.Parallel()
	e := brokertest.StartNATS(t)
	if e.ClientURL() == "" {
		t.Fatal("StartNATS: no TCP listener")
	}
	for _, cfg := range []broker.Config{{}, {URL: e.ClientURL()}} {
		b := brokertest.Open(t, e, cfg)
		if err := b.Ping(context.Background()); err != nil {
			t.Errorf("Ping (URL %q): %v", cfg.URL, err)
		}
	}
}

func TestRestartOnSameStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := brokertest.StartNATSWith(t, broker.EmbeddedConfig{StoreDir: dir})
	e.Shutdown() // Cleanup's second Shutdown is harmless
	e = brokertest.StartNATSWith(t, broker.EmbeddedConfig{StoreDir: dir})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := brokertest.Open(t, e, broker.Config{}).Ping(ctx); err != nil {
		t.Fatal(err)
	}
}
