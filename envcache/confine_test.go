package envcache

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/codexec/codexec/internal/wheeltest"
	"github.com/codexec/codexec/worker/sandbox"
)

// probeSandbox checks once whether the sandbox (its default launcher) works here.
var probeSandbox = sync.OnceValues(func() (*sandbox.Sandbox, error) {
	return sandbox.Probe(context.Background(), sandbox.Config{})
})

// recordingConfiner is the Confiner a worker uses for installs
// (worker/sandbox's Installer, with the network), recording its calls.
type recordingConfiner struct {
	sb    *sandbox.Sandbox
	mu    sync.Mutex
	calls []confineCall
}

type confineCall struct{ argv, readOnly, writable []string }

// setupConfiner returns a real sandbox confiner, or skips the test when the
// sandbox is unusable (fails it in CI).
func setupConfiner(tb testing.TB) *recordingConfiner {
	tb.Helper()
	sb, err := probeSandbox()
	requireTool(tb, "a working sandbox", err)
	return &recordingConfiner{sb: sb}
}

func (r *recordingConfiner) confine(argv, readOnly, writable []string) ([]string, error) {
	r.mu.Lock()
	r.calls = append(r.calls, confineCall{argv: slices.Clone(argv), readOnly: slices.Clone(readOnly), writable: slices.Clone(writable)})
	r.mu.Unlock()
	return r.sb.Installer()(argv, readOnly, writable)
}

// commands returns the base names of the commands confined so far, with
// their first argument ("uv venv", "python3.12 -m").
func (r *recordingConfiner) commands() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		out = append(out, filepath.Base(c.argv[0])+" "+c.argv[1])
	}
	return out
}

// confinedManagers are the managers the sandbox tests build with.
func confinedManagers(tmp string) map[string]Manager {
	return map[string]Manager{
		envspec.ManagerUV:   &UV{CacheDir: filepath.Join(tmp, "uv-cache")},
		envspec.ManagerVenv: &Venv{PipCacheDir: filepath.Join(tmp, "pip-cache")},
	}
}

// forEachBuilder runs test as a subtest for uv (skipped without uv) and for
// venv, each with a new directory tmp and its manager of confinedManagers.
func forEachBuilder(t *testing.T, parallel bool, test func(t *testing.T, name string, m Manager, tmp string)) {
	for _, name := range []string{envspec.ManagerUV, envspec.ManagerVenv} {
		t.Run(name, func(t *testing.T) {
			if parallel {
				t.Parallel()
			}
			if name == envspec.ManagerUV {
				setupUV(t)
			}
			tmp := t.TempDir()
			test(t, name, confinedManagers(tmp)[name], tmp)
		})
	}
}

func TestConfinedBuildFromLocalWheels(t *testing.T) {
	t.Parallel()
	conf := setupConfiner(t)
	py := setupPython(t)
	house := setupWheelhouse(t)
	forEachBuilder(t, true, func(t *testing.T, name string, m Manager, tmp string) {
		rc := &recordingConfiner{sb: conf.sb}
		dir := filepath.Join(tmp, "envs", "env")
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		var progress strings.Builder
		req := CreateRequest{Interpreter: py, Packages: mustReqs(t, "alpha", "beta==2.0"), Index: wheelhouseIndex(house), Confine: rc.confine}
		if err := m.Create(context.Background(), dir, req, &syncWriter{w: &progress}); err != nil {
			t.Fatal(err)
		}
		got := runPython(t, m.Python(dir), "import alpha, gamma, beta, sys; print(alpha.VALUE, beta.VALUE, sys.prefix)")
		if want := "alpha 1.0 beta 2.0 " + dir; got != want {
			t.Errorf("imports printed %q, want %q", got, want)
		}
		// Both commands of the build went through the confiner, each
		// able to write the environment and nothing of the cache's
		// directory but the environment and the package cache.
		want := map[string][]string{envspec.ManagerUV: {"uv venv", "uv pip"}, envspec.ManagerVenv: {filepath.Base(py) + " -m", "python -m"}}[name]
		if got := rc.commands(); !slices.Equal(got, want) {
			t.Errorf("confined commands = %v, want %v", got, want)
		}
		for _, c := range rc.calls {
			if !slices.Contains(c.writable, dir) {
				t.Errorf("%v: writable %v lacks the environment", c.argv, c.writable)
			}
			for _, w := range c.writable {
				if w != dir && !strings.HasSuffix(w, "-cache") && !strings.Contains(w, "envcache-build-") {
					t.Errorf("%v: writable %s is neither the environment, a package cache nor the scratch directory", c.argv, w)
				}
			}
			if !slices.Contains(c.readOnly, filepath.Dir(filepath.Dir(py))) && !sandbox.SystemPath(py) {
				t.Errorf("%v: read-only %v lacks the interpreter's installation", c.argv, c.readOnly)
			}
		}
		if got := rc.calls[len(rc.calls)-1].readOnly; !slices.Contains(got, house) {
			t.Errorf("the install cannot read the find-links directory: %v", got)
		}
	})
}

func TestCacheConfinesBuilds(t *testing.T) {
	t.Parallel()
	conf := setupConfiner(t)
	setupUV(t)
	dir := t.TempDir()
	c, _ := setupCache(t, Config{Dir: dir, Managers: confinedManagers(dir), Index: wheelhouseIndex(setupWheelhouse(t)), Confine: conf.confine})
	env := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"alpha"}})
	defer env.Release()
	if got := runPython(t, env.Python, "import alpha; print(alpha.VALUE)"); got != "alpha 1.0" {
		t.Errorf("import alpha printed %q", got)
	}
	if got, want := conf.commands(), []string{"uv venv", "uv pip"}; !slices.Equal(got, want) {
		t.Errorf("confined commands = %v, want %v", got, want)
	}
}

// hostileSdist writes evil-1.0.tar.gz into dir: a source distribution with
// an in-tree build backend (so that it builds offline, with no setuptools),
// whose build_wheel first tries to write each of targets and to read
// /etc/shadow, then builds a wheel whose module evil.RESULTS records what
// happened: {"writes": {path: "written" or the error}, "shadow": bytes
// read, "environ": the variable names it saw, "home": HOME}.
func hostileSdist(tb testing.TB, dir string, targets []string) string {
	tb.Helper()
	tj, err := json.Marshal(targets)
	if err != nil {
		tb.Fatal(err)
	}
	backend := fmt.Sprintf(`# A hostile build backend for envcache's sandbox tests.
import base64, hashlib, json, os, zipfile

TARGETS = json.loads(%q)

def _attack():
    res = {"writes": {}, "shadow": -1, "environ": sorted(os.environ), "home": os.environ.get("HOME", "")}
    for p in TARGETS:
        try:
            with open(p, "w") as f:
                f.write("written by a package build\n")
            res["writes"][p] = "written"
        except OSError as e:
            res["writes"][p] = repr(e)
    try:
        with open("/etc/shadow", "rb") as f:
            res["shadow"] = len(f.read())
    except OSError:
        pass
    return res

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    res = _attack()
    name = "evil-1.0-py3-none-any.whl"
    files = {
        "evil/__init__.py": "RESULTS = %%r\n" %% (json.dumps(res),),
        "evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
        "evil-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: hostile\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record += "%%s,sha256=%%s,%%d\n" %% (path, digest, len(data))
        z.writestr("evil-1.0.dist-info/RECORD", record + "evil-1.0.dist-info/RECORD,,\n")
    return name
`, string(tj))
	files := [][2]string{
		{"evil-1.0/PKG-INFO", "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n"},
		{"evil-1.0/pyproject.toml", "[build-system]\nrequires = []\nbuild-backend = \"hostile_backend\"\nbackend-path = [\".\"]\n\n[project]\nname = \"evil\"\nversion = \"1.0\"\n"},
		{"evil-1.0/hostile_backend.py", backend},
	}
	path := filepath.Join(dir, "evil-1.0.tar.gz")
	out, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	gz := gzip.NewWriter(out)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			tb.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, gz, out} {
		if err := c.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return path
}

// TestConfinedBuildContainsHostileSdist builds, with each manager, a
// package whose build tries to write outside the environment (another
// environment's place, the cache's metadata, an existing file of the
// worker's, the host's /tmp, the worker's home, the base interpreter's
// site-packages), to read /etc/shadow and the worker's secret variables.
// The build may succeed; none of it may reach the host.
func TestConfinedBuildContainsHostileSdist(t *testing.T) {
	// Not parallel: it sets a variable of the process, as a worker's
	// secret would be.
	const secretVar = "CODEXEC_TEST_WORKER_SECRET"
	t.Setenv(secretVar, "hunter2")
	conf := setupConfiner(t)
	py := setupPython(t)
	forEachBuilder(t, false, func(t *testing.T, name string, m Manager, tmp string) {
		dir := filepath.Join(tmp, "envs", "env-"+name)
		for _, d := range []string{filepath.Dir(dir), filepath.Join(tmp, "meta")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		canary := filepath.Join(tmp, "worker-data", "canary.txt")
		if err := os.MkdirAll(filepath.Dir(canary), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(canary, []byte("original\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		unique := fmt.Sprintf("%d-%s", os.Getpid(), name)
		home, _ := os.UserHomeDir()
		sitePackages := runPython(t, py, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
		absent := []string{
			filepath.Join(filepath.Dir(dir), "env-other"),          // another environment
			filepath.Join(tmp, "meta", "env-other.json"),           // the cache's metadata
			filepath.Join(tmp, "worker-data", "planted.txt"),       // the worker's data
			"/tmp/codexec-hostile-" + unique,                       // the host's /tmp
			filepath.Join(home, "codexec-hostile-"+unique),         // the worker's home
			filepath.Join(sitePackages, "codexec-hostile-"+unique), // the base interpreter
		}
		for _, p := range absent {
			t.Cleanup(func() { os.Remove(p) }) // should it fail, leave the host clean
		}
		targets := append(slices.Clone(absent), canary, "/tmp/.."+canary)
		house := setupWheelhouse(t)
		hostileSdist(t, house, targets)

		rc := &recordingConfiner{sb: conf.sb}
		req := CreateRequest{Interpreter: py, Packages: mustReqs(t, "evil"), Index: sourceIndex(house), Confine: rc.confine}
		var progress strings.Builder
		err := m.Create(context.Background(), dir, req, &syncWriter{w: &progress})

		// What matters first: the host is untouched.
		for _, p := range absent {
			if _, serr := os.Lstat(p); serr == nil {
				t.Errorf("the package build wrote %s outside its environment", p)
			}
		}
		if data, rerr := os.ReadFile(canary); rerr != nil || string(data) != "original\n" {
			t.Errorf("the package build changed %s: %q, %v", canary, data, rerr)
		}
		if err != nil {
			t.Logf("the build failed (allowed): %v", err)
			return
		}
		// It built: what it saw inside the sandbox.
		out := runPython(t, m.Python(dir), "import evil; print(evil.RESULTS)")
		var res struct {
			Writes  map[string]string `json:"writes"`
			Shadow  int               `json:"shadow"`
			Environ []string          `json:"environ"`
			Home    string            `json:"home"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("evil.RESULTS = %q: %v", out, err)
		}
		if res.Shadow > 0 {
			t.Errorf("the package build read %d bytes of /etc/shadow", res.Shadow)
		}
		if slices.Contains(res.Environ, secretVar) {
			t.Errorf("the package build saw the worker's %s", secretVar)
		}
		if res.Home == home || !strings.Contains(res.Home, "envcache-build-") {
			t.Errorf("the package build had HOME=%q, want its scratch directory", res.Home)
		}
		t.Logf("inside the sandbox: %v", res.Writes)
		if len(rc.calls) == 0 {
			t.Error("nothing was confined")
		}
	})
}

func TestConfinedEnvKeepsOnlyInstallerVariables(t *testing.T) {
	t.Parallel()
	got := confinedEnv([]string{"PATH=/usr/bin", "AWS_SECRET_ACCESS_KEY=x", "PIP_INDEX_URL=https://mirror", "UV_CACHE_DIR=/c",
		"HOME=/root", "XDG_CACHE_HOME=/root/.cache", "LC_ALL=C", "NATS_URL=nats://x", "https_proxy=http://p"},
		map[string]string{"HOME": "/scratch", "TMPDIR": "/scratch"})
	want := []string{"PATH=/usr/bin", "PIP_INDEX_URL=https://mirror", "UV_CACHE_DIR=/c", "LC_ALL=C", "https_proxy=http://p", "HOME=/scratch", "TMPDIR=/scratch"}
	if !slices.Equal(got, want) {
		t.Errorf("confinedEnv = %v, want %v", got, want)
	}
}

func TestLocalIndexPaths(t *testing.T) {
	t.Parallel()
	got := localIndexPaths(IndexConfig{IndexURL: "https://pypi.org/simple", ExtraIndexURLs: []string{"file:///srv/index"},
		FindLinks: []string{"/srv/wheels", "https://example.com/links", "relative/dir"}})
	if want := []string{"/srv/index", "/srv/wheels"}; !slices.Equal(got, want) {
		t.Errorf("localIndexPaths = %v, want %v", got, want)
	}
}

// TestConfinedSeededVenvCannotChangeItsSeed asks for a venv seeded from its
// parent with a package whose build writes, in place, the child's path of a
// file of the seed: a confined build takes no seed (see
// TestConfinedSeededBuildRunsNoPackageCode), and the seed's file is not
// changed.
func TestConfinedSeededVenvCannotChangeItsSeed(t *testing.T) {
	t.Parallel()
	conf := setupConfiner(t)
	py := setupPython(t)
	tmp := t.TempDir()
	house := setupWheelhouse(t)
	v := &Venv{PipCacheDir: filepath.Join(tmp, "pip-cache")}
	parent, child := filepath.Join(tmp, "envs", "parent"), filepath.Join(tmp, "envs", "child")
	if err := os.MkdirAll(filepath.Dir(parent), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := v.Create(context.Background(), parent, CreateRequest{Interpreter: py, Packages: mustReqs(t, "alpha"), Index: wheelhouseIndex(house)}, nil); err != nil {
		t.Fatal(err)
	}
	sp := sitePackagesDirs(parent)
	if len(sp) != 1 {
		t.Fatalf("site-packages of %s: %v", parent, sp)
	}
	seedFile := filepath.Join(sp[0], "alpha", "__init__.py")
	before, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(parent, seedFile)
	hostileSdist(t, house, []string{filepath.Join(child, rel)})

	rc := &recordingConfiner{sb: conf.sb}
	req := CreateRequest{Interpreter: py, Packages: mustReqs(t, "alpha", "evil"), Index: sourceIndex(house), Seed: parent, Confine: rc.confine}
	if err := v.Create(context.Background(), child, req, nil); err != nil {
		t.Fatal(err)
	}
	if got := rc.commands(); !slices.Equal(got, []string{filepath.Base(py) + " -m", "python -m"}) || slices.Contains(rc.calls[0].argv, "--without-pip") {
		t.Fatalf("confined commands = %v, want a build without a seed (venv with pip, then pip)", rc.calls)
	}
	if after, err := os.ReadFile(seedFile); err != nil || string(after) != string(before) {
		t.Errorf("the child's build changed its seed's %s: %q, %v", seedFile, after, err)
	}
}

// TestCondaCreateIsConfined checks what a conda create is confined to,
// with the fake conda (no conda here to run in a sandbox): it reads conda
// and writes the prefix, the package caches and its scratch directory.
func TestCondaCreateIsConfined(t *testing.T) {
	// Not parallel: it sets CONDA_PKGS_DIRS.
	fake := writeFakeConda(t, "conda", "")
	pkgs := t.TempDir()
	t.Setenv("CONDA_PKGS_DIRS", pkgs)
	var calls []confineCall
	confine := func(argv, readOnly, writable []string) ([]string, error) {
		calls = append(calls, confineCall{argv: argv, readOnly: readOnly, writable: writable})
		return argv, nil // the fake cannot run in a sandbox: it reads testdata
	}
	dir := filepath.Join(t.TempDir(), "env")
	if err := (&Conda{Bin: fake.bin}).Create(context.Background(), dir, CreateRequest{Python: "3.12", Confine: confine}, nil); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 1 || calls[0].argv[0] != fake.bin || calls[0].argv[1] != "create" {
		t.Fatalf("confined calls = %v, want one conda create", calls)
	}
	c := calls[0]
	if !slices.Contains(c.readOnly, fake.bin) {
		t.Errorf("read-only %v lacks conda itself", c.readOnly)
	}
	if len(c.writable) != 3 || c.writable[0] != dir || c.writable[1] != pkgs || !strings.Contains(c.writable[2], "envcache-build-") {
		t.Errorf("writable = %v, want the prefix, the package cache and the scratch directory", c.writable)
	}
}

// sourceIndex is the wheelhouse with source builds allowed, so that the
// hostile sdists' build code runs (confined).
func sourceIndex(house string) IndexConfig {
	idx := wheelhouseIndex(house)
	idx.SourceBuilds = true
	return idx
}

// By default installers take wheels only: a source distribution's build
// code never runs, confined or not.
func TestWheelsOnlyByDefault(t *testing.T) {
	py := setupPython(t)
	forEachBuilder(t, false, func(t *testing.T, name string, m Manager, tmp string) {
		house := setupWheelhouse(t)
		marker := filepath.Join(t.TempDir(), "the-build-ran")
		hostileSdist(t, house, []string{marker})
		err := m.Create(context.Background(), filepath.Join(tmp, "env"), CreateRequest{Interpreter: py, Packages: mustReqs(t, "evil"), Index: wheelhouseIndex(house)}, nil)
		if err == nil {
			t.Fatal("a package with no wheel was installed without source builds")
		}
		if _, serr := os.Lstat(marker); serr == nil {
			t.Fatal("the package's build code ran")
		}
	})
}

// TestConfinedSeededBuildRunsNoPackageCode derives a venv from a parent that
// holds a wheel with a .pth file (no source build needed to ship one) and
// one that replaces pip's entry point. The child's install runs in the
// install sandbox, which has the network and the shared package caches
// writable: none of the parent's packages' code may run there, or any
// session could plant files in the caches that other sessions' later
// builds install, and reach the worker's loopback services.
func TestConfinedSeededBuildRunsNoPackageCode(t *testing.T) {
	t.Parallel()
	conf := setupConfiner(t)
	py := setupPython(t)
	tmp := t.TempDir()
	house := setupWheelhouse(t)
	pipCache := filepath.Join(tmp, "pip-cache")
	v := &Venv{PipCacheDir: pipCache}
	byPth := filepath.Join(pipCache, "planted-by-pth")
	byPip := filepath.Join(pipCache, "planted-by-pip")
	wheeltest.Wheel{Dist: "pthbomb", Version: "1.0", Module: "pthbomb", TopLevel: true, Extra: [][2]string{
		{"pthbomb_hook.pth", fmt.Sprintf("import os; os.path.isdir(%q) and open(%q, 'w').write('x')\n", pipCache, byPth)},
		// pip's own package, overwritten: pip installs a wheel's files
		// over another distribution's without a word.
		{"pip/__main__.py", fmt.Sprintf("import os\nif os.path.isdir(%q): open(%q, 'w').write('x')\nfrom pip._internal.cli.main import main\nraise SystemExit(main())\n", pipCache, byPip)},
	}}.Write(t, house)
	parent, child := filepath.Join(tmp, "envs", "parent"), filepath.Join(tmp, "envs", "child")
	if err := os.MkdirAll(filepath.Dir(parent), 0o755); err != nil {
		t.Fatal(err)
	}
	rc := &recordingConfiner{sb: conf.sb}
	if err := v.Create(context.Background(), parent, CreateRequest{Interpreter: py, Packages: mustReqs(t, "pthbomb"), Index: wheelhouseIndex(house), Confine: rc.confine}, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{byPth, byPip} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists after the parent's build: the test proves nothing", p)
		}
	}
	req := CreateRequest{Interpreter: py, Packages: mustReqs(t, "pthbomb", "alpha"), Index: wheelhouseIndex(house), Seed: parent, Confine: rc.confine}
	if err := v.Create(context.Background(), child, req, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{byPth, byPip} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("the child's install ran its parent's package code: it wrote %s in the shared pip cache", p)
		}
	}
	if got := runPython(t, v.Python(child), "import alpha, pthbomb; print(alpha.VALUE)"); got != "alpha 1.0" {
		t.Errorf("the child imports alpha as %q", got)
	}
}

// TestBuildCannotFillTheDisk installs a wheel of 256 KB that holds a file
// of 256 MiB of zeros, which uv and pip unpack twice (the package cache, then
// the environment) with no limit of their own: the build is stopped once
// it passes what the disk may give it (here 64 MiB, through diskFloor).
func TestBuildCannotFillTheDisk(t *testing.T) {
	// Not parallel: it sets diskFloor, and measures the disk.
	conf := setupConfiner(t)
	py := setupPython(t)
	floor := diskFloor
	diskFloor = func(avail, total uint64) uint64 { return avail - min(avail, 64<<20) }
	t.Cleanup(func() { diskFloor = floor })
	forEachBuilder(t, false, func(t *testing.T, name string, m Manager, tmp string) {
		house := t.TempDir()
		zeros := make([]byte, 1<<20)
		var blob strings.Builder
		for range 256 {
			blob.Write(zeros)
		}
		wheeltest.Wheel{Dist: "zbomb", Version: "1.0", Module: "zbomb", TopLevel: true,
			Extra: [][2]string{{"zbomb/blob.bin", blob.String()}}}.Write(t, house)
		blob.Reset()
		dir := filepath.Join(tmp, "envs", "env")
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		rc := &recordingConfiner{sb: conf.sb}
		err := m.Create(context.Background(), dir, CreateRequest{Interpreter: py, Packages: mustReqs(t, "zbomb"), Index: wheelhouseIndex(house), Confine: rc.confine}, nil)
		if !errors.Is(err, ErrBuildFillsDisk) {
			t.Errorf("a build that unpacked 512 MiB past the disk's floor ended with %v, want ErrBuildFillsDisk", err)
		}
	})
}

// TestBuildCannotTakeEveryInode installs a wheel of many empty files (a
// wheel of 100 MB may hold a million, each an inode of the package cache
// and one of the environment): the build is stopped once it passes the
// inodes the file system may give it (here 2,000, through inodeFloor).
func TestBuildCannotTakeEveryInode(t *testing.T) {
	// Not parallel: it sets inodeFloor, and measures the file system.
	conf := setupConfiner(t)
	py := setupPython(t)
	if _, _, _, files, ok := diskSpace(t.TempDir()); !ok || files == 0 {
		t.Skip("the file system has no fixed number of inodes")
	}
	floor := inodeFloor
	inodeFloor = func(free, total uint64) uint64 { return free - min(free, 2000) }
	t.Cleanup(func() { inodeFloor = floor })
	forEachBuilder(t, false, func(t *testing.T, name string, m Manager, tmp string) {
		house := t.TempDir()
		var extra [][2]string
		for i := range 20_000 {
			extra = append(extra, [2]string{fmt.Sprintf("ibomb/d%d/f%d.txt", i/1000, i), ""})
		}
		wheeltest.Wheel{Dist: "ibomb", Version: "1.0", Module: "ibomb", TopLevel: true, Extra: extra}.Write(t, house)
		dir := filepath.Join(tmp, "envs", "env")
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		rc := &recordingConfiner{sb: conf.sb}
		err := m.Create(context.Background(), dir, CreateRequest{Interpreter: py, Packages: mustReqs(t, "ibomb"), Index: wheelhouseIndex(house), Confine: rc.confine}, nil)
		if !errors.Is(err, ErrBuildFillsDisk) {
			t.Errorf("a build that made 40,000 files past the file system's floor ended with %v, want ErrBuildFillsDisk", err)
		}
	})
}

// TestBuildRefusesAPackageThatReplacesTheInterpreter installs wheels whose
// data files land over pyvenv.cfg (its home then names a standard library
// of the package's choosing, whose encodings module any start of the
// interpreter imports, -S or not) and over bin/python (pip installs a
// script of that name; uv refuses it): the worker starts an environment's
// interpreter as root, for its zygote, so either would run a package's code
// there. The build fails instead.
func TestBuildRefusesAPackageThatReplacesTheInterpreter(t *testing.T) {
	t.Parallel()
	conf := setupConfiner(t)
	py := setupPython(t)
	house := setupWheelhouse(t)
	wheeltest.Wheel{Dist: "cfgover", Version: "1.0", Module: "cfgover", TopLevel: true, Extra: [][2]string{
		{"cfgover-1.0.data/data/pyvenv.cfg", "home = /nonexistent/evil/bin\ninclude-system-site-packages = false\n"},
	}}.Write(t, house)
	wheeltest.Wheel{Dist: "pyover", Version: "1.0", Module: "pyover", TopLevel: true, Extra: [][2]string{
		{"pyover-1.0.data/scripts/python", "#!/bin/sh\necho replaced\n"},
	}}.Write(t, house)
	forEachBuilder(t, true, func(t *testing.T, name string, m Manager, tmp string) {
		for _, pkg := range []string{"cfgover", "pyover"} {
			dir := filepath.Join(tmp, "envs", pkg)
			if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
				t.Fatal(err)
			}
			rc := &recordingConfiner{sb: conf.sb}
			err := m.Create(context.Background(), dir, CreateRequest{Interpreter: py, Packages: mustReqs(t, pkg, "alpha"), Index: wheelhouseIndex(house), Confine: rc.confine}, nil)
			if name == envspec.ManagerUV && pkg == "pyover" {
				if err == nil {
					t.Errorf("%s: uv installed a script named python", pkg)
				}
				continue // uv refuses it itself
			}
			if !errors.Is(err, ErrInterpreterReplaced) {
				t.Errorf("%s: the build ended with %v, want ErrInterpreterReplaced", pkg, err)
			}
		}
	})
}
