package envcache

import (
	"context"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fixture reads a sample output from testdata/conda (see its README).
func fixture(tb testing.TB, name string) []byte {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "conda", name))
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

func fixturePath(tb testing.TB, name string) string {
	tb.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", "conda", name))
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// fakeConda is a FAKE conda for the command-shape and failure tests only:
// a shell script that records each argv it gets and replays the sample
// outputs of testdata/conda. It solves and installs nothing; create makes
// the prefix look like a conda environment (conda-meta, bin/python). The
// real thing is exercised by TestCondaEndToEnd.
type fakeConda struct {
	bin      string // the script
	argvFile string // one argument a line, "--" after each call
	envsRoot string // root prefix: envsRoot/envs/<name> are "named environments"
}

// writeFakeConda writes the fake as dir/name. failWith, when not empty, is
// the sample a create or install prints before exiting with status 1.
func writeFakeConda(tb testing.TB, name, failWith string) *fakeConda {
	tb.Helper()
	dir := tb.TempDir()
	f := &fakeConda{bin: filepath.Join(dir, name), argvFile: filepath.Join(dir, "argv"), envsRoot: filepath.Join(dir, "root")}
	// Two named environments and the root, as env list reports them.
	var envs []string
	for _, p := range []string{f.envsRoot, filepath.Join(f.envsRoot, "envs", "ds"), filepath.Join(f.envsRoot, "envs", "broken")} {
		envs = append(envs, fmt.Sprintf("%q", p))
		if err := os.MkdirAll(filepath.Join(p, "conda-meta"), 0o755); err != nil {
			tb.Fatal(err)
		}
		if filepath.Base(p) != "broken" {
			fakeInterpreter(tb, filepath.Join(p, "bin", "python"), "echo fake python\n")
		}
	}
	envList := filepath.Join(dir, "env-list.json")
	if err := os.WriteFile(envList, []byte(`{"envs": [`+strings.Join(envs, ", ")+`]}`), 0o644); err != nil {
		tb.Fatal(err)
	}
	fail := ""
	if failWith != "" {
		fail = fixturePath(tb, failWith)
	}
	script := fmt.Sprintf(`# FAKE conda for envcache's tests: records argv, replays samples. Not a conda.
for a in "$@"; do printf '%%s\n' "$a"; done >> '%s'
echo -- >> '%s'
case "$1" in
--version) echo "conda 24.9.2"; exit 0 ;;
create|install)
  if [ -n '%s' ]; then cat '%s'; echo "warning: from the fake's stderr" >&2; exit 1; fi
  prefix=; prev=
  for a in "$@"; do [ "$prev" = --prefix ] && prefix=$a; prev=$a; done
  mkdir -p "$prefix/bin" "$prefix/conda-meta"
  printf '#!/bin/sh\necho fake python\n' > "$prefix/bin/python"
  chmod +x "$prefix/bin/python"
  cat '%s'; exit 0 ;;
list) cat '%s'; exit 0 ;;
env) cat '%s'; exit 0 ;;
esac
echo "fake conda: unexpected $1" >&2
exit 2
`, f.argvFile, f.argvFile, fail, fail, fixturePath(tb, "conda-create-success.out"), fixturePath(tb, "conda-list.json"), envList)
	fakeInterpreter(tb, f.bin, script)
	return f
}

// calls returns the argv of each call so far, without the executable.
func (f *fakeConda) calls(tb testing.TB) [][]string {
	tb.Helper()
	data, err := os.ReadFile(f.argvFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]string
	var cur []string
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "--" {
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return out
}

func TestCondaCommandShape(t *testing.T) {
	t.Parallel()
	fake := writeFakeConda(t, "conda", "")
	c := &Conda{Bin: fake.bin, Channels: []string{"conda-forge"}, OverrideChannels: true}
	ctx := context.Background()
	if err := c.Available(ctx); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "env")
	if err := c.Create(ctx, dir, CreateRequest{Python: "3.12", Packages: mustReqs(t, "numpy>=1.26", "Python_ABI")}, nil); err != nil {
		t.Fatal(err)
	}
	offline := filepath.Join(t.TempDir(), "offline")
	if err := c.Create(ctx, offline, CreateRequest{Packages: mustReqs(t, "tomli==2.*"), Index: IndexConfig{NoIndex: true, IndexURL: "https://ignored"}}, nil); err != nil {
		t.Fatal(err)
	}
	calls := fake.calls(t)
	want := [][]string{
		{"--version"},
		{"create", "--yes", "--json", "--prefix", dir, "--override-channels", "--channel", "conda-forge", "python=3.12", "numpy>=1.26", "python_abi"},
		{"create", "--yes", "--json", "--prefix", offline, "--override-channels", "--channel", "conda-forge", "--offline", "python", "tomli==2.*"},
	}
	if !slices.EqualFunc(calls, want, slices.Equal) {
		t.Errorf("conda was called with\n%q\nwant\n%q", calls, want)
	}
	if fi, err := os.Stat(c.Python(dir)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("no interpreter at %s", c.Python(dir))
	}

	// What conda cannot express is refused before conda runs.
	for _, bad := range []string{"requests[socks]", "tomli; python_version < '3.11'"} {
		err := c.Create(ctx, filepath.Join(t.TempDir(), "x"), CreateRequest{Packages: mustReqs(t, bad)}, nil)
		if !errors.Is(err, envspec.ErrBadRequirement) {
			t.Errorf("Create with %q: %v", bad, err)
		}
	}
	if n := len(fake.calls(t)); n != 3 {
		t.Errorf("conda ran %d times, want 3", n)
	}
}

func TestCondaListAndEnvironments(t *testing.T) {
	t.Parallel()
	fake := writeFakeConda(t, "conda", "")
	c := &Conda{Bin: fake.bin}
	ctx := context.Background()
	prefix := filepath.Join(fake.envsRoot, "envs", "ds")
	info := filepath.Join(prefix, "lib", "python3.12", "site-packages", "PyYAML-6.0.1.dist-info")
	if err := os.MkdirAll(info, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"METADATA": "Name: PyYAML\nVersion: 6.0.1\n", "top_level.txt": "_yaml\nyaml\n"} {
		if err := os.WriteFile(filepath.Join(info, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dists, err := c.List(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := distNames(dists), []string{"_libgcc_mutex==0.1", "iniconfig==2.0.0", "python==3.12.4", "pyyaml==6.0.1", "tomli==2.0.1"}; !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	if d, ok := envspec.Lookup(dists, "yaml"); !ok || d.Name != "pyyaml" || d.Channel != "conda-forge" {
		t.Errorf("envspec.Lookup(yaml) = %+v, %v", d, ok)
	}
	if d, ok := envspec.Lookup(dists, "iniconfig"); !ok || d.Channel != "pypi" {
		t.Errorf("envspec.Lookup(iniconfig) = %+v, %v", d, ok)
	}

	envs, err := c.EnvList(ctx)
	if err != nil || len(envs) != 3 || envs[0] != fake.envsRoot {
		t.Fatalf("EnvList = %v, %v", envs, err)
	}
	for in, want := range map[string]string{"ds": prefix, "base": fake.envsRoot, prefix: prefix} {
		if got, err := c.ResolveEnv(ctx, in); err != nil || got != want {
			t.Errorf("ResolveEnv(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for in, says := range map[string]string{
		"nope":               `no environment "nope" (there are: base, ds, broken)`,
		"broken":             "has no bin/python",
		t.TempDir():          "not a conda environment",
		"/nonexistent/envs/": "not a conda environment",
	} {
		if _, err := c.ResolveEnv(ctx, in); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("ResolveEnv(%q): %v, want an error saying %q", in, err, says)
		}
	}
	a := c.Activation(prefix)
	if a.Vars["CONDA_PREFIX"] != prefix || a.Vars["CONDA_DEFAULT_ENV"] != "ds" || a.Vars["CONDA_SHLVL"] != "1" ||
		!slices.Equal(a.PathPrefix, []string{filepath.Join(prefix, "bin")}) {
		t.Errorf("Activation = %+v", a)
	}
	if a := c.Activation("/opt/prefix-env"); a.Vars["CONDA_DEFAULT_ENV"] != "/opt/prefix-env" {
		t.Errorf("Activation of an unnamed prefix = %+v", a)
	}
}

func TestCondaFailureCarriesCondasExplanation(t *testing.T) {
	t.Parallel()
	fake := writeFakeConda(t, "conda", "conda-packages-not-found.json")
	c := &Conda{Bin: fake.bin}
	dir := filepath.Join(t.TempDir(), "env")
	err := c.Create(context.Background(), dir, CreateRequest{Python: "3.12", Packages: mustReqs(t, "nonexistent-pkg-xyz")}, nil)
	var be *BuildError
	var ce *CondaError
	if !errors.As(err, &be) || !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *BuildError wrapping a *CondaError", err)
	}
	if ce.Exception != "PackagesNotFoundError" || !strings.HasPrefix(ce.Message, "The following packages are not available") {
		t.Errorf("CondaError = %+v", ce)
	}
	for _, want := range []string{"nonexistent-pkg-xyz", "warning: from the fake's stderr"} {
		if !strings.Contains(be.Output, want) {
			t.Errorf("BuildError.Output does not show %q:\n%s", want, be.Output)
		}
	}
	if be.Args[0] != fake.bin || be.Args[1] != "create" || !strings.Contains(err.Error(), "PackagesNotFoundError") {
		t.Errorf("BuildError = %v", err)
	}
}

func TestMicromambaCommandShape(t *testing.T) {
	t.Parallel()
	fake := writeFakeConda(t, "micromamba", "micromamba-solve-failure.json")
	c := &Conda{Bin: fake.bin, RootPrefix: "/srv/mamba"}
	dir := filepath.Join(t.TempDir(), "env")
	err := c.Create(context.Background(), dir, CreateRequest{Packages: mustReqs(t, "nonexistent-pkg-xyz")}, nil)
	var ce *CondaError
	if !errors.As(err, &ce) || ce.Message != "could not solve: nothing provides requested nonexistent-pkg-xyz" {
		t.Errorf("err = %v, want the solver's problems", err)
	}
	want := []string{"create", "--yes", "--json", "--prefix", dir, "--root-prefix", "/srv/mamba", "--channel", "conda-forge", "python", "nonexistent-pkg-xyz"}
	if calls := fake.calls(t); len(calls) != 1 || !slices.Equal(calls[0], want) {
		t.Errorf("micromamba was called with %q, want %q", calls, want)
	}
}

func TestCondaBinaryPreference(t *testing.T) {
	t.Parallel()
	on := func(names ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			if slices.Contains(names, name) {
				return "/opt/bin/" + name, nil
			}
			return "", exec.ErrNotFound
		}
	}
	for _, tt := range []struct {
		c     Conda
		want  string
		micro bool
	}{
		{Conda{lookPath: on("conda", "mamba", "micromamba")}, "/opt/bin/conda", false},
		{Conda{lookPath: on("mamba", "micromamba")}, "/opt/bin/mamba", false},
		{Conda{lookPath: on("micromamba")}, "/opt/bin/micromamba", true},
		{Conda{Prefer: []string{"micromamba", "conda"}, lookPath: on("conda", "micromamba")}, "/opt/bin/micromamba", true},
		{Conda{Bin: "mamba", lookPath: on("mamba")}, "/opt/bin/mamba", false},
		{Conda{Bin: "/x/micromamba-2.0", lookPath: on()}, "/x/micromamba-2.0", true},
	} {
		got, micro, err := tt.c.binary()
		if err != nil || got != tt.want || micro != tt.micro {
			t.Errorf("binary() with %+v = %s, %v, %v; want %s, %v", tt.c.Prefer, got, micro, err, tt.want, tt.micro)
		}
	}
	_, _, err := (&Conda{lookPath: on()}).binary()
	if err == nil || !strings.Contains(err.Error(), "none of conda, mamba, micromamba found on PATH") {
		t.Errorf("no conda anywhere: %v", err)
	}
	if err := (&Conda{Bin: "no-such-conda", lookPath: on()}).Available(context.Background()); err == nil {
		t.Error("Available with no conda: no error")
	}
}

func TestParseCondaSamples(t *testing.T) {
	t.Parallel()
	if ce := parseCondaFailure(fixture(t, "conda-create-success.out")); ce != nil {
		t.Errorf("a successful create parsed as a failure: %v", ce)
	}
	if got := string(lastJSON(fixture(t, "conda-create-success.out"))); !strings.HasPrefix(got, "{\n  \"actions\"") {
		t.Errorf("lastJSON skipped the progress records wrongly: %.40q", got)
	}
	ce := parseCondaFailure(fixture(t, "conda-packages-not-found.json"))
	if ce == nil || ce.Exception != "PackagesNotFoundError" || !strings.Contains(ce.Error(), "nonexistent-pkg-xyz") {
		t.Errorf("PackagesNotFoundError parsed as %+v", ce)
	}
	if ce := parseCondaFailure(fixture(t, "micromamba-solve-failure.json")); ce == nil || ce.Exception != "" {
		t.Errorf("micromamba's failure parsed as %+v", ce)
	}
	for _, out := range []string{"", "not json", "[]", `{"success": true}`, "\x00\x00",
		`{"message": "All requested packages already installed.", "success": true}`} {
		if ce := parseCondaFailure([]byte(out)); ce != nil {
			t.Errorf("parseCondaFailure(%q) = %+v", out, ce)
		}
	}
	if ce := parseCondaFailure([]byte(`{"error": "CondaHTTPError: HTTP 000 CONNECTION FAILED", "exception_name": "CondaHTTPError"}`)); ce == nil ||
		ce.Message != "HTTP 000 CONNECTION FAILED" {
		t.Errorf("an error without message parsed as %+v", ce)
	}

	envs, err := parseCondaEnvList(fixture(t, "conda-env-list.json"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"base": "/opt/conda", "datascience": "/opt/conda/envs/datascience", "py311": "/opt/conda/envs/py311"} {
		if got, err := findCondaEnv(envs, name); err != nil || got != want {
			t.Errorf("findCondaEnv(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	if _, err := findCondaEnv(envs, "prefix-env"); err == nil {
		t.Error("an environment outside envs/ has no name, but was found by one")
	}
	menvs, err := parseCondaEnvList(fixture(t, "micromamba-env-list.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := findCondaEnv(menvs, "ml"); err != nil || got != "/root/micromamba/envs/ml" {
		t.Errorf("micromamba ml = %q, %v", got, err)
	}
	if _, err := findCondaEnv(nil, "x"); err == nil || !strings.Contains(err.Error(), "knows no environments") {
		t.Errorf("findCondaEnv in nothing: %v", err)
	}
	if _, err := parseCondaEnvList([]byte("oops")); err == nil {
		t.Error("parseCondaEnvList of garbage: no error")
	}

	dists, err := parseCondaList(fixture(t, "conda-list.json"), t.TempDir())
	if err != nil || len(dists) != 5 || dists[3].Name != "pyyaml" || dists[3].Imports != nil {
		t.Errorf("parseCondaList = %+v, %v", dists, err)
	}
}

func TestCacheWithFakeConda(t *testing.T) {
	t.Parallel()
	fake := writeFakeConda(t, "conda", "")
	c, _ := setupCache(t, Config{Managers: map[string]Manager{envspec.ManagerConda: &Conda{Bin: fake.bin}}})
	env := ensure(t, c, envspec.Spec{Manager: "conda", Python: "3.11", Packages: []string{"tomli>=2"}})
	defer env.Release()
	if env.Python != filepath.Join(env.Dir, "bin", "python") || env.Activation.Vars["CONDA_PREFIX"] != env.Dir {
		t.Errorf("Env = %+v", env)
	}
	want := []string{"create", "--yes", "--json", "--prefix", env.Dir, "python=3.11", "tomli>=2"}
	if calls := fake.calls(t); len(calls) != 2 || !slices.Equal(calls[0], []string{"--version"}) || !slices.Equal(calls[1], want) {
		t.Errorf("conda calls = %q, want --version then %q", calls, want)
	}

	existing := ensure(t, c, envspec.Spec{Manager: "conda", Existing: "ds"})
	if !existing.Existing || existing.Dir != filepath.Join(fake.envsRoot, "envs", "ds") || existing.Activation.Vars["CONDA_DEFAULT_ENV"] != "ds" {
		t.Errorf("existing Env = %+v", existing)
	}
	if held := c.Held(); !slices.Contains(held, existing.ID) || !slices.Contains(held, env.ID) {
		t.Errorf("Held = %v", held)
	}
	if _, err := c.Ensure(context.Background(), envspec.Spec{Manager: "conda", Packages: []string{"requests[socks]"}}, nil); !errors.Is(err, envspec.ErrBadRequirement) {
		t.Errorf("a conda spec with extras: %v", err)
	}
}

// TestCondaEndToEnd builds a real conda environment. It runs only where a
// conda, mamba or micromamba binary is on PATH and conda-forge answers;
// otherwise it skips, saying which is missing. This is the one test that
// skips in CI (CI=true) as well: the CI machines have no conda, and the
// conda paths are covered there by the command-shape and parsing tests
// above, with the fake and the samples.
func TestCondaEndToEnd(t *testing.T) {
	t.Parallel()
	c := &Conda{Channels: []string{"conda-forge"}, OverrideChannels: true}
	if _, _, err := c.binary(); err != nil {
		t.Skipf("no conda to test with: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	req, _ := http.NewRequestWithContext(ctx, http.MethodHead, "https://conda.anaconda.org/conda-forge/noarch/repodata.json", nil)
	resp, err := probeURL(req)
	cancel()
	if err != nil {
		t.Skipf("the conda-forge channel cannot be reached: %v", err)
	}
	resp.Body.Close()
	if err := c.Available(context.Background()); err != nil {
		t.Fatal(err)
	}

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cache, _ := setupCache(t, Config{Managers: map[string]Manager{envspec.ManagerConda: c}})
	env, err := cache.Ensure(ctx, envspec.Spec{Manager: "conda", Python: "3.12", Packages: []string{"tomli"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Release()
	if got := runPython(t, env.Python, "import sys, tomli; print(sys.version_info[:2] == (3, 12), sys.prefix)"); got != "True "+env.Dir {
		t.Errorf("the environment's python printed %q", got)
	}
	dists, err := c.List(ctx, env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := envspec.Lookup(dists, "tomli"); !ok || d.Channel != "conda-forge" || !slices.Contains(d.Imports, "tomli") {
		t.Errorf("envspec.Lookup(tomli) = %+v, %v", d, ok)
	}
	_, err = cache.Ensure(ctx, envspec.Spec{Manager: "conda", Packages: []string{"no-such-package-in-conda-forge-xyz"}}, nil)
	var ce *CondaError
	if !errors.As(err, &ce) {
		t.Errorf("a missing package: %v, want a *CondaError", err)
	}
}
