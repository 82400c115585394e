package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/worker/sandbox"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
)

// The tests' side of the end-to-end harness: package e2e does the work and
// returns errors; these wrappers fail the test on them and stop what they
// started at cleanup, logging its output when the test failed.

// stopGrace is how long a child process has to exit after SIGTERM at
// cleanup before it is killed.
const stopGrace = 20 * time.Second

// clientInfo is who the tests say they are in initialize.
var clientInfo = mcp.Implementation{Name: "codexec-e2e", Version: "0"}

// codexecEnv is the environment every codexec child process of the tests
// gets: this test binary acting as codexec, the sandbox mode of
// defaultSandbox, the register of session uids of the test binary, and
// nothing of the developer's own codexec settings. extra comes last, so a
// test's own CODEXEC_SANDBOX wins.
func codexecEnv(extra ...string) []string {
	return e2e.CleanEnv(append(append([]string{"CODEXEC_E2E_MAIN=1", "CODEXEC_UID_DIR=" + uidDir()}, defaultSandbox()...), append(launcherEnv(), extra...)...)...)
}

// launcherEnv passes the test's own CODEXEC_SANDBOX_LAUNCHER on to codexec
// (CleanEnv keeps the others out): `CODEXEC_SANDBOX_LAUNCHER=bwrap go test`
// runs the suites with bubblewrap, and without it they run with codexec's
// default, the built-in launcher.
func launcherEnv() []string {
	if l := os.Getenv("CODEXEC_SANDBOX_LAUNCHER"); l != "" {
		return []string{"CODEXEC_SANDBOX_LAUNCHER=" + l}
	}
	return nil
}

// uidDir is the register of session uids (--uid-dir) of every codexec
// process the test binary starts: what /var/lib/codexec/uids is to the
// workers of a host, kept out of the host's own.
var uidDir = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "codexec-e2e-uids-")
	if err != nil {
		panic(err)
	}
	return filepath.Join(dir, "uids")
})

// defaultSandbox is what the tests that do not test the sandbox run with.
// Where the sandbox works, nothing: codexec's default, which is the sandbox
// or no start at all. codexec never falls back to running jobs unconfined
// by itself, so on a developer's machine without namespaces these tests ask
// for that explicitly (CODEXEC_SANDBOX=off) rather than fail; in CI they do
// not, and codexec refusing to start fails them.
var defaultSandbox = sync.OnceValue(func() []string {
	if os.Getenv("CI") == "true" {
		return nil
	}
	if _, err := sandbox.Probe(context.Background(), sandbox.Config{Launcher: os.Getenv("CODEXEC_SANDBOX_LAUNCHER")}); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: no working sandbox here (%v): codexec runs with --sandbox off in the tests that do not test the sandbox\n", err)
		return []string{"CODEXEC_SANDBOX=off"}
	}
	return nil
})

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

func venvFor(t testing.TB) string {
	t.Helper()
	v, err := sharedVenv()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// stdio starts cmd as an MCP server on stdio (see e2e.StartStdio),
// initialized, and stopped at cleanup. before runs at cleanup before the
// stop (nil: nothing).
func stdio(t testing.TB, cmd e2e.Command, before func(*e2e.Proc)) (*client.Client, *e2e.Proc) {
	t.Helper()
	c, p, err := e2e.StartStdio(context.Background(), cmd, mcp.LATEST_PROTOCOL_VERSION, clientInfo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if before != nil {
			before(p)
		}
		p.Stop(stopGrace)
		if t.Failed() {
			t.Logf("%s stderr:\n%s", p.Name, p.Out.String())
		}
	})
	return c, p
}

// devStdio starts `codexec dev` over stdio through mcp-go's stdio client,
// initialized, and closed at cleanup. It returns the client and the stderr log.
func devStdio(t testing.TB, dataDir string, extraEnv ...string) (*client.Client, *e2e.Buffer) {
	t.Helper()
	env := codexecEnv(append([]string{"CODEXEC_DATA_DIR=" + dataDir, "CODEXEC_VENV=" + venvFor(t)}, extraEnv...)...)
	c, p := stdio(t, e2e.Command{Name: "codexec dev", Path: os.Args[0], Args: []string{"dev"}, Env: env}, nil)
	return c, p.Out
}

// devStdioMinimal is devStdio with the small environment a desktop MCP
// client gives the servers it starts (the official SDKs pass little more
// than HOME, PATH, USER and TERM): nothing of the developer's shell, such as
// SSL_CERT_FILE or PIP_CERT, reaches codexec.
func devStdioMinimal(t testing.TB, dataDir string, extraEnv ...string) *client.Client {
	t.Helper()
	env := append([]string{"CODEXEC_E2E_MAIN=1", "CODEXEC_DATA_DIR=" + dataDir, "CODEXEC_VENV=" + venvFor(t), "CODEXEC_UID_DIR=" + uidDir()}, defaultSandbox()...)
	for _, name := range []string{"HOME", "PATH", "USER", "LOGNAME", "TERM", "CI"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	env = append(env, extraEnv...)
	c, _ := stdio(t, e2e.Command{Name: "codexec dev", Path: os.Args[0], Args: []string{"dev"}, Env: env}, nil)
	return c
}

// proc is a codexec (or other) child process of a test.
type proc struct{ *e2e.Proc }

// startProc starts a child process; it is stopped at cleanup.
func startProc(t testing.TB, env []string, name string, args ...string) *proc {
	t.Helper()
	p, err := start(t)(e2e.Command{Path: name, Args: args, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	return &proc{p}
}

// start is an e2e.Starter whose processes are stopped at t's cleanup.
func start(t testing.TB) e2e.Starter {
	return func(c e2e.Command) (*e2e.Proc, error) {
		p, err := c.Start()
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() {
			p.Stop(stopGrace)
			// A worker killed mid-test left its sessions' file systems
			// mounted under its data directory, which t.TempDir could not
			// then remove.
			e2e.UnmountUnder(e2e.DataDirOf(c.Args, c.Env))
			if t.Failed() {
				t.Logf("%s %s output:\n%s", filepath.Base(c.Path), strings.Join(c.Args, " "), p.Out.String())
			}
		})
		return p, nil
	}
}

func (p *proc) signal(sig syscall.Signal) { p.Signal(sig) }

var urlRe = e2e.URLRe

// waitFor waits until re matches the process's output and returns the first group.
func (p *proc) waitFor(t testing.TB, re *regexp.Regexp, within time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := p.WaitFor(ctx, re)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// httpClient connects an initialized Streamable HTTP client to url, speaking
// the newest protocol revision that has sessions.
func httpClient(t testing.TB, url string, opts ...transport.StreamableHTTPCOption) *client.Client {
	return httpClientVersion(t, url, mcp.LATEST_LEGACY_PROTOCOL_VERSION, opts...)
}

// httpClientVersion is httpClient speaking protocol revision version.
func httpClientVersion(t testing.TB, url, version string, opts ...transport.StreamableHTTPCOption) *client.Client {
	t.Helper()
	c, err := e2e.ConnectHTTP(context.Background(), url, version, clientInfo, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// callWithin calls a tool and decodes its structured content into a T,
// failing the test if no answer comes within `within`.
func callWithin[T any](t testing.TB, c *client.Client, tool string, args map[string]any, within time.Duration) (*mcp.CallToolResult, T) {
	t.Helper()
	var out T
	res, err := e2e.Call(context.Background(), c, tool, args, within)
	if err != nil {
		t.Fatalf("%s: no answer within %s: %v", tool, within, err)
	}
	if err := e2e.Decode(res, &out); err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res, out
}

// callAs calls a tool and decodes its structured content into a T.
func callAs[T any](t testing.TB, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, T) {
	t.Helper()
	return callWithin[T](t, c, tool, args, 3*time.Minute)
}

// call calls a tool and decodes its structured content.
func call(t testing.TB, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, frontend.ExecResult) {
	t.Helper()
	return callAs[frontend.ExecResult](t, c, tool, args)
}

func text(r *mcp.CallToolResult) string { return e2e.Text(r) }

func freePort(t testing.TB) int {
	t.Helper()
	port, err := e2e.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// requireOrSkip skips the test when something it needs is missing, or fails
// it under CI=true, so that CI cannot pass by skipping.
func requireOrSkip(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI needs %s: %v", what, err)
	}
	t.Skipf("no %s: %v", what, err)
}
