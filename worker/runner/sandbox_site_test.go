package runner

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/worker/sandbox"
	"golang.org/x/sys/unix"
)

// An environment's own start-up code (the import lines of its .pth files,
// its sitecustomize module), which any installed package can bring, never
// runs in the sandboxed zygote: the zygote is root with the capabilities
// that set up every job's sandbox, and sees every session's directories.
// It runs in each job instead, as the job's session uid, as it would at an
// interpreter's start; the .pth files' directories are on sys.path there.
// Only an environment no session installs into (TrustSite: the worker's
// base environment) keeps that code in its zygote.
func TestSandboxedZygoteRunsNoEnvironmentCode(t *testing.T) {
	l := newSandboxLayout(t)
	env := filepath.Join(t.TempDir(), "env")
	if out, err := exec.Command(l.python, "-m", "venv", "--without-pip", env).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	sitePackages, err := filepath.Glob(filepath.Join(env, "lib", "python3*", "site-packages"))
	if err != nil || len(sitePackages) != 1 {
		t.Fatalf("site-packages of %s: %v %v", env, sitePackages, err)
	}
	sp := sitePackages[0]
	extra := filepath.Join(env, "extra")
	if err := os.Mkdir(extra, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		// Each records, in a list every process inherits from its parent,
		// the uid it ran as.
		filepath.Join(sp, "zz_evil.pth"):      extra + "\nimport builtins, os; builtins.__dict__.setdefault('_pth_uids', []).append(os.getuid())\n",
		filepath.Join(sp, "sitecustomize.py"): "import builtins, os\nbuiltins.__dict__.setdefault('_custom_uids', []).append(os.getuid())\n",
		filepath.Join(extra, "from_pth.py"):   "X = 'named by a .pth'\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := *l.cfg
	cfg.Mounts = append(slices.Clone(cfg.Mounts), sandbox.Mount{Path: env})
	python := filepath.Join(env, "bin", "python")
	z := startZygote(t, ZygoteConfig{Python: python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: &cfg})
	trusted := startZygote(t, ZygoteConfig{Python: python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: &cfg, TrustSite: true})
	job := `import builtins, json, os, sys
import from_pth
print(json.dumps({'pth': getattr(builtins, '_pth_uids', None), 'custom': getattr(builtins, '_custom_uids', None),
                  'from_pth': from_pth.X, 'exit': callable(getattr(builtins, 'exit', None)), 'uid': os.getuid()}))
`
	for _, s := range []struct {
		name string
		uid  int
	}{{"a", testUIDA}, {"b", testUIDB}} {
		spec := l.spec(t, s.name, s.uid, job)
		spec.Python = python
		out := zrun(t, z, spec)
		if out.ExitCode != 0 {
			t.Fatalf("session %s: exit %d, stdout %q, stderr %q", s.name, out.ExitCode, out.Stdout, out.Stderr)
		}
		var r struct {
			Pth, Custom []int
			FromPth     string `json:"from_pth"`
			Exit        bool
			UID         int
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(string(out.Stdout))), &r); err != nil {
			t.Fatalf("session %s: %q: %v (stderr %q)", s.name, out.Stdout, err, out.Stderr)
		}
		// CPython itself runs a venv's .pth files twice (site.venv, then
		// site.main's own pass): as many times here, all in the job.
		onlyJob := func(uids []int) bool {
			return len(uids) > 0 && !slices.ContainsFunc(uids, func(u int) bool { return u != s.uid })
		}
		if !onlyJob(r.Pth) || !slices.Equal(r.Custom, []int{s.uid}) {
			t.Errorf("session %s: the .pth import line ran as %v and sitecustomize as %v; want them run as the job's uid %d only (never as the zygote's)",
				s.name, r.Pth, r.Custom, s.uid)
		}
		if r.FromPth != "named by a .pth" || !r.Exit {
			t.Errorf("session %s: a .pth file's directory on sys.path: %q; exit() there: %v", s.name, r.FromPth, r.Exit)
		}

		// The worker's own base environment, which no session installs
		// into, keeps its start-up code in its zygote (TrustSite): run
		// there, as root, and not again in the job.
		out = zrun(t, trusted, spec)
		if err := json.Unmarshal([]byte(strings.TrimSpace(string(out.Stdout))), &r); err != nil {
			t.Fatalf("session %s, trusted: %q: %v (stderr %q)", s.name, out.Stdout, err, out.Stderr)
		}
		if slices.Contains(r.Pth, s.uid) || !slices.Equal(r.Custom, []int{0}) || r.FromPth != "named by a .pth" {
			t.Errorf("session %s, trusted: the .pth import line ran as %v, sitecustomize as %v, from_pth %q; want them run in the zygote only",
				s.name, r.Pth, r.Custom, r.FromPth)
		}
	}
}

// TestSandboxedZygoteReadsBoundedPthFiles starts a zygote on an environment
// whose packages brought a .pth larger than a .pth has any reason to be and
// a FIFO named like one: the zygote reads .pth files as root, outside every
// job's limits, and stat()s each line that is not an import (a .pth of 8 MB
// of "x" lines, 8 KB as a wheel, cost 25 s of CPU at each start). It reads
// 64 KiB of one, never waits on a FIFO, and a line past the bound names no
// directory on the jobs' sys.path.
func TestSandboxedZygoteReadsBoundedPthFiles(t *testing.T) {
	l := newSandboxLayout(t)
	env := filepath.Join(t.TempDir(), "env")
	if out, err := exec.Command(l.python, "-m", "venv", "--without-pip", env).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v\n%s", err, out)
	}
	sitePackages, err := filepath.Glob(filepath.Join(env, "lib", "python3*", "site-packages"))
	if err != nil || len(sitePackages) != 1 {
		t.Fatalf("site-packages of %s: %v %v", env, sitePackages, err)
	}
	sp := sitePackages[0]
	near, far := filepath.Join(env, "near"), filepath.Join(env, "far")
	for _, d := range []string{near, far} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(sp, "a_near.pth"): near + "\n",
		filepath.Join(sp, "b_big.pth"):  strings.Repeat("# padding\n", 7000) + far + "\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mkfifo(filepath.Join(sp, "c_fifo.pth"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := *l.cfg
	cfg.Mounts = append(slices.Clone(cfg.Mounts), sandbox.Mount{Path: env})
	python := filepath.Join(env, "bin", "python")
	z := startZygote(t, ZygoteConfig{Python: python, Env: ChildEnv(nil, "", "", nil, nil), Sandbox: &cfg, StartTimeout: 20 * time.Second})
	spec := l.spec(t, "a", testUIDA, "import json, sys\nprint(json.dumps(sys.path))\n")
	spec.Python = python
	out := zrun(t, z, spec)
	if out.ExitCode != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", out.ExitCode, out.Stdout, out.Stderr)
	}
	var path []string
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out.Stdout))), &path); err != nil {
		t.Fatalf("%q: %v", out.Stdout, err)
	}
	if !slices.Contains(path, near) {
		t.Errorf("sys.path %v lacks %s, named by a small .pth", path, near)
	}
	if slices.Contains(path, far) {
		t.Errorf("sys.path holds %s, named 70 KB into a .pth: the zygote read past its bound", far)
	}
}
