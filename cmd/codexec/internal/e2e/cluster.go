package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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

// NATSNode is one server of a NATS cluster on the loopback.
type NATSNode struct {
	Name        string
	Port        int // for clients
	ClusterPort int // for routes
}

// URL is the node's client URL.
func (n NATSNode) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.Port) }

// NATSNodes names n cluster nodes ("n1", "n2", ...) on free ports.
func NATSNodes(n int) ([]NATSNode, error) {
	nodes := make([]NATSNode, n)
	for i := range nodes {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		cp, err := FreePort()
		if err != nil {
			return nil, err
		}
		nodes[i] = NATSNode{Name: fmt.Sprintf("n%d", i+1), Port: p, ClusterPort: cp}
	}
	return nodes, nil
}

// StartNATSNode starts node i of nodes: nats-server bin with JetStream, its
// store in storeDir, in the cluster "codexec" with routes to every other
// node. It waits until the server is ready, not until JetStream has
// elected its leaders (that needs a majority of the nodes up).
func StartNATSNode(ctx context.Context, start Starter, bin string, env []string, storeDir string, nodes []NATSNode, i int) (*Proc, error) {
	var routes []string
	for j, n := range nodes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", n.ClusterPort))
		}
	}
	n := nodes[i]
	p, err := start(Command{Name: "nats-server " + n.Name, Path: bin, Env: env,
		Args: []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(n.Port), "-sd", storeDir,
			"-n", n.Name, "--cluster_name", "codexec",
			"--cluster", fmt.Sprintf("nats://127.0.0.1:%d", n.ClusterPort), "--routes", strings.Join(routes, ",")}})
	if err != nil {
		return nil, err
	}
	if _, err := p.WaitFor(ctx, NATSReadyRe); err != nil {
		return nil, err
	}
	return p, nil
}

// StartNATSAt starts nats-server bin with JetStream on port of the loopback
// with its store in storeDir, and waits until it is ready: the same server
// again, where its clients look for it, after it was killed.
func StartNATSAt(ctx context.Context, start Starter, bin string, env []string, storeDir string, port int) (*Proc, error) {
	p, err := start(Command{Name: "nats-server", Path: bin, Env: env,
		Args: []string{"-js", "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-sd", storeDir}})
	if err != nil {
		return nil, err
	}
	if _, err := p.WaitFor(ctx, NATSReadyRe); err != nil {
		return nil, err
	}
	return p, nil
}
