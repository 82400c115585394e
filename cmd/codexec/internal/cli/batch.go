package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/mark3labs/mcp-go/client"
	"github.com/nats-io/nats.go"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/cmd/codexec/internal/batch"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker"
)

// runBatch is `codexec batch`; without --url it runs the batch on an
// embedded single-node codexec (embeddedBatch).
func runBatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return batch.Main(ctx, args, batch.Options{Embedded: embeddedBatch, DataDir: defaultDataDir()}, stdout, stderr)
}

// embeddedBatch starts what `codexec dev` runs (embedded NATS, a bbolt
// state store, one worker with the settings of the worker's flags and
// variables, a frontend), under dataDir, and connects an in-process MCP
// client to the frontend. Its logs go to dataDir/codexec.log, so that the
// batch's progress has the terminal to itself.
func embeddedBatch(ctx context.Context, dataDir string) (c *client.Client, stop func(), err error) {
	var ff frontendFlags
	var wf workerFlags
	f := newFlags("batch", io.Discard)
	ff.register(f, "")
	wf.register(f)
	if err := f.Parse(nil); err != nil {
		return nil, nil, err
	}
	if dataDir, err = mkdirPrivate(dataDir); err != nil {
		return nil, nil, err
	}
	logFile, err := os.OpenFile(filepath.Join(dataDir, "codexec.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	stops = append(stops, func() { _ = logFile.Close() })
	st, err := statestore.OpenBolt(filepath.Join(dataDir, "state.db"))
	if err != nil {
		return nil, nil, fmt.Errorf("state store (is another batch running on %s?): %w", dataDir, err)
	}
	stops = append(stops, func() { _ = st.Close() })
	ns, err := broker.StartEmbedded(broker.EmbeddedConfig{StoreDir: filepath.Join(dataDir, "jetstream"), Logger: log.With("component", "nats")})
	if err != nil {
		return nil, nil, fmt.Errorf("embedded nats: %w", err)
	}
	stops = append(stops, ns.Shutdown)
	b, err := openBroker(ctx, broker.Config{ConnectOptions: []nats.Option{ns.ConnectOption()}, Name: "codexec-batch", Logger: log})
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, b.Close)
	wcfg := wf.config(dataDir, wire.DefaultPool, &ff, log.With("component", "worker"))
	wcfg.LocalWorkspaces = true
	if wf.batchSlots == 0 {
		wcfg.BatchConcurrency = worker.AllSlots // nothing else runs here
	}
	w, err := worker.New(wcfg, b, st)
	if err != nil {
		return nil, nil, err
	}
	if err := startWorker(ctx, w); err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { stopWorker(w, defaultStopGrace, log) })
	fe, err := frontend.New(ff.config(wire.DefaultPool, auth.Policy{}, log.With("component", "frontend")), b, st)
	if err != nil {
		return nil, nil, err
	}
	c, err = client.NewInProcessClient(fe.MCPServer(true))
	if err != nil {
		return nil, nil, err
	}
	stops = append(stops, func() { _ = c.Close() })
	if err := c.Start(ctx); err != nil {
		return nil, nil, err
	}
	if err := batch.Initialize(ctx, c); err != nil {
		return nil, nil, errors.Join(errors.New("embedded codexec"), err)
	}
	return c, stop, nil
}
