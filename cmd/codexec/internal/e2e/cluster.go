package e2e

import (
	"context"
	"fmt"
	"strconv"
)

// The multi-process topology, one process at a time: each function starts
// its process through start (which owns it from then on) and waits until
// it is ready.

// StartNATS starts nats-server bin with JetStream on a free port of the
// loopback, its store in storeDir, and returns its URL and port.
func StartNATS(ctx context.Context, start Starter, bin string, env []string, storeDir string) (*Proc, string, int, error) {
	port, err := FreePort()
	if err != nil {
		return nil, "", 0, err
	}
	p, err := start(Command{Name: "nats-server", Path: bin, Env: env,
		Args: []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", storeDir}})
	if err != nil {
		return nil, "", 0, err
	}
	if _, err := p.WaitFor(ctx, NATSReadyRe); err != nil {
		return nil, "", 0, err
	}
	return p, fmt.Sprintf("nats://127.0.0.1:%d", port), port, nil
}

// StartFrontend starts `exe frontend` on HTTP on a free port of the
// loopback, and returns its MCP URL.
func StartFrontend(ctx context.Context, start Starter, exe string, env []string) (*Proc, string, error) {
	p, err := start(Command{Name: "frontend", Path: exe, Env: env, Args: []string{"frontend", "--http", "127.0.0.1:0"}})
	if err != nil {
		return nil, "", err
	}
	url, err := p.WaitFor(ctx, URLRe)
	if err != nil {
		return nil, "", err
	}
	return p, url, nil
}

// StartWorker starts `exe worker args...` and waits until it is ready.
func StartWorker(ctx context.Context, start Starter, name, exe string, env []string, args ...string) (*Proc, error) {
	p, err := start(Command{Name: name, Path: exe, Env: env, Args: append([]string{"worker"}, args...)})
	if err != nil {
		return nil, err
	}
	if _, err := p.WaitFor(ctx, WorkerReadyRe); err != nil {
		return nil, err
	}
	return p, nil
}
