package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// initTimeout bounds the initialize handshake: a server's first start may
// build its default venv.
const initTimeout = 2 * time.Minute

// Initialize performs the MCP handshake, speaking protocol revision
// protocol and introducing itself as info.
func Initialize(ctx context.Context, c *client.Client, protocol string, info mcp.Implementation) error {
	ctx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = protocol
	req.Params.ClientInfo = info
	if _, err := c.Initialize(ctx, req); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	return nil
}

// StartStdio starts cmd as an MCP server on stdio, the way a desktop client
// does, through mcp-go's stdio client, and initializes it. Its stderr is
// the Proc's output; Proc.Stop closes the client, then ends what is left
// of the process group.
func StartStdio(ctx context.Context, cmd Command, protocol string, info mcp.Implementation) (*client.Client, *Proc, error) {
	p := &Proc{Name: cmd.name(), Out: &Buffer{Limit: cmd.OutputLimit}, done: make(chan struct{})}
	c, err := client.NewStdioMCPClientWithOptions(cmd.Path, cmd.Env, cmd.Args,
		transport.WithCommandFunc(func(_ context.Context, command string, env, args []string) (*exec.Cmd, error) {
			ec := exec.Command(command, args...)
			ec.Env = env
			ec.Stderr = p.Out
			ec.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			p.Cmd = ec
			return ec, nil
		}))
	if err != nil {
		return nil, nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.closeFn = func() {
		_ = c.Close() // waits for the process
		close(p.done)
	}
	if err := Initialize(ctx, c, protocol, info); err != nil {
		p.Stop(time.Second)
		return nil, nil, fmt.Errorf("%s: %w\n%s", p.Name, err, p.Out.String())
	}
	return c, p, nil
}

// ConnectHTTP connects a Streamable HTTP client to url and initializes it.
func ConnectHTTP(ctx context.Context, url, protocol string, info mcp.Implementation, opts ...transport.StreamableHTTPCOption) (*client.Client, error) {
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	if err := Initialize(ctx, c, protocol, info); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// ResumeHTTP connects to the Streamable HTTP endpoint at url in the
// existing MCP session sessionID, without initializing a new one: what a
// client does after the frontend that served it died and a load balancer
// sends it to another (a session id is valid on every frontend).
func ResumeHTTP(ctx context.Context, url, sessionID string, opts ...transport.StreamableHTTPCOption) (*client.Client, error) {
	t, err := transport.NewStreamableHTTP(url, append(opts, transport.WithSession(sessionID))...)
	if err != nil {
		return nil, err
	}
	c := client.NewClient(t, client.WithSession())
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// Call calls tool with args and waits at most within for the answer.
func Call(ctx context.Context, c *client.Client, tool string, args map[string]any, within time.Duration) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = tool, args
	return c.CallTool(ctx, req)
}

// Decode decodes res's structured content into v; it leaves v as it is
// when res has none.
func Decode(res *mcp.CallToolResult, v any) error {
	if res.StructuredContent == nil {
		return nil
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("structured content %.300s: %w", raw, err)
	}
	return nil
}

// Text is all the text content of res.
func Text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
