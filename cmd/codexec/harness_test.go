package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// codexecEnv is the environment every codexec child process of the tests
// gets: this test binary acting as codexec, and nothing of the developer's
// own codexec settings.
func codexecEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "CODEXEC_") || name == "CODE_STORAGE_DIR" || name == "ENV_TYPE" {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "CODEXEC_E2E_MAIN=1"), extra...)
}

// sharedVenv is one default venv for every codexec process of the test
// binary, so each test does not pay for `python -m venv`.
var sharedVenv = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "codexec-e2e-venv-")
	if err != nil {
		return "", err
	}
	venv := filepath.Join(dir, "venv")
	out, err := exec.Command("python3", "-m", "venv", venv).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("python3 -m venv: %v: %s", err, out)
	}
	return venv, nil
})

func venvFor(t *testing.T) string {
	t.Helper()
	v, err := sharedVenv()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// devStdio starts `codexec dev` over stdio through mcp-go's stdio client,
// initialized, and closed at cleanup. It returns the client and the stderr log.
func devStdio(t *testing.T, dataDir string, extraEnv ...string) (*client.Client, *syncBuffer) {
	t.Helper()
	stderr := &syncBuffer{}
	env := codexecEnv(append([]string{"CODEXEC_DATA_DIR=" + dataDir, "CODEXEC_VENV=" + venvFor(t)}, extraEnv...)...)
	c, err := client.NewStdioMCPClientWithOptions(os.Args[0], env, []string{"dev"},
		transport.WithCommandStderrWriter(stderr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Logf("close stdio client: %v", err)
		}
		if t.Failed() {
			t.Logf("codexec dev stderr:\n%s", stderr.String())
		}
	})
	initialize(t, c, mcp.LATEST_PROTOCOL_VERSION)
	return c, stderr
}

// devStdioMinimal is devStdio with the small environment a desktop MCP
// client gives the servers it starts (the official SDKs pass little more
// than HOME, PATH, USER and TERM): nothing of the developer's shell, such as
// SSL_CERT_FILE or PIP_CERT, reaches codexec.
func devStdioMinimal(t *testing.T, dataDir string, extraEnv ...string) *client.Client {
	t.Helper()
	stderr := &syncBuffer{}
	env := []string{"CODEXEC_E2E_MAIN=1", "CODEXEC_DATA_DIR=" + dataDir, "CODEXEC_VENV=" + venvFor(t)}
	for _, name := range []string{"HOME", "PATH", "USER", "LOGNAME", "TERM", "CI"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	env = append(env, extraEnv...)
	c, err := client.NewStdioMCPClientWithOptions(os.Args[0], nil, []string{"dev"},
		transport.WithCommandStderrWriter(stderr),
		transport.WithCommandFunc(func(ctx context.Context, command string, _ []string, args []string) (*exec.Cmd, error) {
			cmd := exec.CommandContext(ctx, command, args...)
			cmd.Env = env
			return cmd, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Close()
		if t.Failed() {
			t.Logf("codexec dev stderr:\n%s", stderr.String())
		}
	})
	initialize(t, c, mcp.LATEST_PROTOCOL_VERSION)
	return c
}

func initialize(t *testing.T, c *client.Client, version string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := mcp.InitializeRequest{}
	req.Params.ProtocolVersion = version
	req.Params.ClientInfo = mcp.Implementation{Name: "codexec-e2e", Version: "0"}
	if _, err := c.Initialize(ctx, req); err != nil {
		t.Fatalf("initialize: %v", err)
	}
}

// proc is a codexec (or other) child process of a test.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
}

// startProc starts a child process; it is killed at cleanup.
func startProc(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.stderr
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.signal(syscall.SIGKILL)
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s %s output:\n%s", filepath.Base(name), strings.Join(args, " "), p.stderr.String())
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) { _ = syscall.Kill(-p.cmd.Process.Pid, sig) }

var urlRe = regexp.MustCompile(`url=(http://[^ ]+/mcp)`)

// waitFor waits until re matches the process's output and returns the first group.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(p.stderr.String()); m != nil {
			if len(m) > 1 {
				return m[1]
			}
			return m[0]
		}
		select {
		case <-p.done:
			t.Fatalf("process exited early:\n%s", p.stderr.String())
		case <-p.stderr.changed():
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("no %q in output within %s:\n%s", re, within, p.stderr.String())
	return ""
}

// httpClient connects an initialized Streamable HTTP client to url, speaking
// the newest protocol revision that has sessions.
func httpClient(t *testing.T, url string, opts ...transport.StreamableHTTPCOption) *client.Client {
	return httpClientVersion(t, url, mcp.LATEST_LEGACY_PROTOCOL_VERSION, opts...)
}

// httpClientVersion is httpClient speaking protocol revision version.
func httpClientVersion(t *testing.T, url, version string, opts ...transport.StreamableHTTPCOption) *client.Client {
	t.Helper()
	c, err := client.NewStreamableHttpClient(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	initialize(t, c, version)
	return c
}

// call calls a tool and decodes its structured content.
func call(t *testing.T, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, frontend.ExecResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name = tool
	req.Params.Arguments = args
	res, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	var er frontend.ExecResult
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &er); err != nil {
		t.Fatalf("structured content %s: %v", raw, err)
	}
	return res, er
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a goroutine-safe buffer that signals writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}
