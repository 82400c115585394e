package envcache

import (
	"context"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireTool skips a test when a tool it needs is missing, except in CI
// (CI=true), where a missing tool fails the run.
func requireTool(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s is needed in CI: %v", what, err)
	}
	tb.Skipf("%s is not available: %v", what, err)
}

// uvAvailable checks once whether uv runs here.
var uvAvailable = sync.OnceValue(func() error { return (&UV{}).Available(context.Background()) })

func setupUV(tb testing.TB) {
	tb.Helper()
	requireTool(tb, "uv", uvAvailable())
}

// mustReqs parses requirement strings.
func mustReqs(tb testing.TB, ss ...string) []envspec.Requirement {
	tb.Helper()
	out := make([]envspec.Requirement, len(ss))
	for i, s := range ss {
		r, err := envspec.ParseRequirement(s, false)
		if err != nil {
			tb.Fatal(err)
		}
		out[i] = r
	}
	return out
}

// runPython runs code with the interpreter at py and returns its stdout.
func runPython(tb testing.TB, py, code string) string {
	tb.Helper()
	out, err := exec.Command(py, "-c", code).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s -c %q: %v\n%s", py, code, err, out)
	}
	return strings.TrimSpace(string(out))
}

// distNames returns "name==version" of each dist.
func distNames(dists []envspec.Dist) []string {
	var out []string
	for _, d := range dists {
		out = append(out, d.Name+"=="+d.Version)
	}
	return out
}

func TestUVCreateInstallAndList(t *testing.T) {
	t.Parallel()
	setupUV(t)
	py := setupPython(t)
	tmp := t.TempDir()
	house := setupWheelhouse(t)
	uv := &UV{CacheDir: filepath.Join(tmp, "uv-cache")}
	dir := filepath.Join(tmp, "env")
	var progress strings.Builder
	req := CreateRequest{Interpreter: py, Packages: mustReqs(t, "alpha", "scikit-fake", "odd-name", "beta==1.0"), Index: wheelhouseIndex(house)}
	if err := uv.Create(context.Background(), dir, req, &syncWriter{w: &progress}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "Installed") {
		t.Errorf("progress did not get uv's output:\n%s", progress.String())
	}
	got := runPython(t, uv.Python(dir), "import alpha, gamma, skfake, oddmod, oddsingle, beta, sys; print(alpha.VALUE, beta.VALUE, sys.prefix)")
	if want := "alpha 1.0 beta 1.0 " + dir; got != want {
		t.Errorf("imports printed %q, want %q", got, want)
	}

	dists, err := uv.List(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if names, want := distNames(dists), []string{"alpha==1.0", "beta==1.0", "gamma==1.0", "Odd_Name==0.3", "scikit-fake==1.0"}; !slices.Equal(names, want) {
		t.Errorf("List = %v, want %v", names, want)
	}
	for q, want := range map[string]string{
		"scikit-fake": "scikit-fake", "Scikit_Fake": "scikit-fake", "skfake": "scikit-fake",
		"oddmod": "Odd_Name", "oddsingle": "Odd_Name", "odd.name": "Odd_Name", "gamma": "gamma", "alpha.sub": "alpha",
	} {
		if d, ok := envspec.Lookup(dists, q); !ok || d.Name != want {
			t.Errorf("envspec.Lookup(%q) = %+v, %v; want %s", q, d, ok, want)
		}
	}
	for _, q := range []string{"numpy", "", "skfake2"} {
		if d, ok := envspec.Lookup(dists, q); ok {
			t.Errorf("envspec.Lookup(%q) = %+v, want none", q, d)
		}
	}

	// Another environment (a derived spec, as the cache builds it) pins
	// a later version, and gets it; the first keeps its own.
	derived := filepath.Join(tmp, "derived")
	req.Packages = mustReqs(t, "alpha", "beta==2.0")
	if err := uv.Create(context.Background(), derived, req, nil); err != nil {
		t.Fatal(err)
	}
	if got := runPython(t, uv.Python(derived), "import alpha, beta; print(beta.VALUE)"); got != "beta 2.0" {
		t.Errorf("with beta==2.0: %q", got)
	}
	if got := runPython(t, uv.Python(dir), "import beta; print(beta.VALUE)"); got != "beta 1.0" {
		t.Errorf("the first environment changed: %q", got)
	}

	a := uv.Activation(dir)
	if a.Vars["VIRTUAL_ENV"] != dir || !slices.Equal(a.PathPrefix, []string{filepath.Join(dir, "bin")}) {
		t.Errorf("Activation = %+v", a)
	}
}

func TestUVInstallFailureCarriesOutput(t *testing.T) {
	t.Parallel()
	setupUV(t)
	py := setupPython(t)
	tmp := t.TempDir()
	uv := &UV{CacheDir: filepath.Join(tmp, "uv-cache")}
	dir := filepath.Join(tmp, "env")
	err := uv.Create(context.Background(), dir, CreateRequest{Interpreter: py, Packages: mustReqs(t, "no-such-package-anywhere"),
		Index: wheelhouseIndex(setupWheelhouse(t))}, nil)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BuildError", err)
	}
	if !strings.Contains(be.Output, "no-such-package-anywhere") || filepath.Base(be.Args[0]) != "uv" || !slices.Contains(be.Args, "--") {
		t.Errorf("BuildError does not carry uv's explanation and argv: %+v", be)
	}
	if err := uv.Create(context.Background(), dir, CreateRequest{Interpreter: py}, nil); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("Create into an existing directory: %v", err)
	}
}

func TestVenvCreateInstallAndList(t *testing.T) {
	if testing.Short() {
		t.Skip("ensurepip takes seconds")
	}
	t.Parallel()
	py := setupPython(t)
	tmp := t.TempDir()
	v := &Venv{PipCacheDir: filepath.Join(tmp, "pip-cache")}
	dir := filepath.Join(tmp, "env")
	req := CreateRequest{Interpreter: py, Packages: mustReqs(t, "alpha", "scikit-fake"), Index: wheelhouseIndex(setupWheelhouse(t))}
	if err := v.Create(context.Background(), dir, req, nil); err != nil {
		t.Fatal(err)
	}
	if got := runPython(t, v.Python(dir), "import alpha, gamma, skfake; print(alpha.VALUE)"); got != "alpha 1.0" {
		t.Errorf("imports printed %q", got)
	}
	dists, err := v.List(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"alpha", "gamma", "scikit-fake", "pip"} {
		if _, ok := envspec.Lookup(dists, name); !ok {
			t.Errorf("List lacks %s: %v", name, distNames(dists))
		}
	}
	if d, ok := envspec.Lookup(dists, "skfake"); !ok || d.Name != "scikit-fake" {
		t.Errorf("envspec.Lookup(skfake) = %+v, %v", d, ok)
	}

	// pip's failure (in a child seeded from dir, which skips ensurepip)
	// carries its output and argv.
	req = CreateRequest{Interpreter: py, Packages: mustReqs(t, "missing-package"), Index: wheelhouseIndex(t.TempDir()), Seed: dir}
	err = v.Create(context.Background(), filepath.Join(tmp, "child"), req, nil)
	var be *BuildError
	if !errors.As(err, &be) || !strings.Contains(be.Output, "missing-package") || !slices.Contains(be.Args, "--no-index") {
		t.Errorf("pip failure: %v", err)
	}
}

func TestInstalledReadsMetadataOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp := filepath.Join(dir, "lib", "python3.12", "site-packages")
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(sp, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A package whose import would fail: Installed must not import it.
	write("PyYAML-6.0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: PyYAML\nVersion: 6.0.1\n\nbody\n")
	write("PyYAML-6.0.1.dist-info/top_level.txt", "_yaml\nyaml\n")
	write("yaml/__init__.py", "raise SystemExit('imported!')\n")
	// RECORD only, with an extension module, a namespace package, a .pth,
	// a script outside site-packages and a quoted path.
	write("proto_thing-1.0.dist-info/METADATA", "Name: proto-thing\nVersion: 1.0\n")
	write("proto_thing-1.0.dist-info/RECORD", strings.Join([]string{
		"google/protobuf/__init__.py,sha256=x,1",
		"_speedups.cpython-312-x86_64-linux-gnu.so,sha256=x,1",
		"proto_thing-1.0.dist-info/METADATA,,",
		"__pycache__/x.cpython-312.pyc,,",
		"proto_thing.pth,,",
		"../../../bin/proto,,",
		`"weird,name/__init__.py",,`,
		"plain.py,,",
	}, "\n"))
	// A legacy egg-info directory and file, and junk.
	write("legacy-2.0-py3.12.egg-info/PKG-INFO", "Metadata-Version: 1.0\nName: legacy\nVersion: 2.0\n")
	write("legacy-2.0-py3.12.egg-info/top_level.txt", "legacy\n")
	write("single-0.1-py3.12.egg-info", "Metadata-Version: 1.0\nName: single\nVersion: 0.1\n")
	write("broken-1.0.dist-info/RECORD", "")
	if err := os.Symlink("lib", filepath.Join(dir, "lib64")); err != nil {
		t.Fatal(err)
	}

	dists, err := Installed(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []envspec.Dist{
		{Name: "legacy", Version: "2.0", Imports: []string{"legacy"}},
		{Name: "proto-thing", Version: "1.0", Imports: []string{"_speedups", "google", "plain"}},
		{Name: "PyYAML", Version: "6.0.1", Imports: []string{"_yaml", "yaml"}},
		{Name: "single", Version: "0.1"},
	}
	if len(dists) != len(want) {
		t.Fatalf("Installed = %+v, want %+v", dists, want)
	}
	for i := range want {
		if dists[i].Name != want[i].Name || dists[i].Version != want[i].Version || !slices.Equal(dists[i].Imports, want[i].Imports) {
			t.Errorf("dist %d = %+v, want %+v", i, dists[i], want[i])
		}
	}
	if d, ok := envspec.Lookup(dists, "yaml"); !ok || d.Name != "PyYAML" {
		t.Errorf("envspec.Lookup(yaml) = %+v, %v", d, ok)
	}
	if d, ok := envspec.Lookup(dists, "google.protobuf"); !ok || d.Name != "proto-thing" {
		t.Errorf("envspec.Lookup(google.protobuf) = %+v, %v", d, ok)
	}
	if _, err := Installed(t.TempDir()); err == nil {
		t.Error("Installed of a directory without site-packages: no error")
	}
}

func TestActivationApply(t *testing.T) {
	t.Parallel()
	a := Activation{Vars: map[string]string{"VIRTUAL_ENV": "/e", "X": "1"}, PathPrefix: []string{"/e/bin"}}
	got := a.Apply([]string{"HOME=/h", "PATH=/usr/bin:/bin", "VIRTUAL_ENV=/old", "PYTHONHOME=/x", "X=0"})
	want := []string{"HOME=/h", "VIRTUAL_ENV=/e", "X=1", "PATH=/e/bin:/usr/bin:/bin"}
	if !slices.Equal(got, want) {
		t.Errorf("Apply = %q, want %q", got, want)
	}
	if got := a.Apply(nil); !slices.Equal(got, []string{"VIRTUAL_ENV=/e", "X=1", "PATH=/e/bin"}) {
		t.Errorf("Apply(nil) = %q", got)
	}
}

func TestIndexConfigArgs(t *testing.T) {
	t.Parallel()
	idx := IndexConfig{IndexURL: "https://mirror/simple", ExtraIndexURLs: []string{"https://a", "https://b"}, FindLinks: []string{"/w"}, NoIndex: true, SourceBuilds: true}
	want := []string{"--no-index", "--index-url", "https://mirror/simple", "--extra-index-url", "https://a", "--extra-index-url", "https://b", "--find-links", "/w"}
	if got := idx.pipArgs(); !slices.Equal(got, want) {
		t.Errorf("pipArgs = %q, want %q", got, want)
	}
	// Wheels only unless source builds are allowed: building runs the
	// package's code at install time.
	if got := (IndexConfig{}).pipArgs(); !slices.Equal(got, []string{"--only-binary", ":all:"}) {
		t.Errorf("zero IndexConfig gives %q", got)
	}
}

// syncWriter makes a writer safe for the concurrent writes a test may see.
type syncWriter struct {
	mu sync.Mutex
	w  interface{ Write([]byte) (int, error) }
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// A failed build's error names the command and carries the installer's
// output, and both name the operator's package indexes: the credentials in
// their URLs are hidden, since the error reaches the caller whose install
// failed.
func TestBuildErrorHidesIndexCredentials(t *testing.T) {
	t.Parallel()
	setupUV(t)
	py := setupPython(t)
	tmp := t.TempDir()
	uv := &UV{CacheDir: filepath.Join(tmp, "uv-cache")}
	idx := IndexConfig{IndexURL: "http://user:SECRETTOKEN@127.0.0.1:9/simple", ExtraIndexURLs: []string{"https://u2:SECRET2@127.0.0.1:9/x"}}
	err := uv.Create(context.Background(), filepath.Join(tmp, "env"), CreateRequest{Interpreter: py,
		Packages: mustReqs(t, "no-such-package-anywhere"), Index: idx}, nil)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BuildError", err)
	}
	if msg := err.Error(); strings.Contains(msg, "SECRET") || !strings.Contains(msg, "http://***@127.0.0.1:9/simple") {
		t.Errorf("the build's error shows the index's credentials, or no index: %s", msg)
	}
	if out := RedactURLs(be.Output); strings.Contains(out, "SECRET") {
		t.Errorf("the installer's output, redacted, shows the credentials: %s", out)
	}
}

// TestInstalledBoundsWhatPackagesMake lists an environment whose packages
// were made to cost the worker (which lists environments for every session
// that asks, in its own memory): a top_level.txt of millions of lines, a
// RECORD of many modules, thousands of distributions. Installed reads a
// bounded part of each. A 100 MB top_level.txt of "a" lines (100 KB as a
// wheel) took 11.6 s and 3.5 GB of the worker per call before the bounds.
func TestInstalledBoundsWhatPackagesMake(t *testing.T) {
	// Not parallel: it measures what the process allocates.
	dir := t.TempDir()
	sp := filepath.Join(dir, "lib", "python3.12", "site-packages")
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(sp, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("bomb-1.0.dist-info/METADATA", "Name: bomb\nVersion: 1.0\n\n")
	write("bomb-1.0.dist-info/top_level.txt", strings.Repeat("a\n", 8<<20))
	var names, record strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&names, "m%d\n", i)
		fmt.Fprintf(&record, "r%d.py,,\n", i)
	}
	write("many-1.0.dist-info/METADATA", "Name: many\nVersion: 1.0\n\n")
	write("many-1.0.dist-info/top_level.txt", names.String())
	write("rec-1.0.dist-info/METADATA", "Name: rec\nVersion: 1.0\n\n")
	write("rec-1.0.dist-info/RECORD", record.String())
	for i := range maxDistributions + 100 {
		write(fmt.Sprintf("d%d-1.0.dist-info/METADATA", i), fmt.Sprintf("Name: d%d\nVersion: 1.0\n\n", i))
	}
	long := strings.Repeat("x", 1<<20)
	write("longname-1.0.dist-info/METADATA", "Name: "+long+"\nVersion: 1.0\n\n")
	write("longimport-1.0.dist-info/METADATA", "Name: longimport\nVersion: 1.0\n\n")
	write("longimport-1.0.dist-info/top_level.txt", long[:60<<10]+"\n")

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	dists, err := Installed(dir)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Errorf("listing the environment allocated %d MiB", got>>20)
	}
	if len(dists) > maxDistributions {
		t.Errorf("%d distributions listed, more than %d", len(dists), maxDistributions)
	}
	for _, d := range dists {
		if len(d.Imports) > maxImportNames {
			t.Errorf("%s: %d import names, more than %d", d.Name, len(d.Imports), maxImportNames)
		}
		if len(d.Name) > maxNameLen || slices.ContainsFunc(d.Imports, func(s string) bool { return len(s) > maxNameLen }) {
			t.Errorf("a distribution named in %d bytes, or with an import name longer than %d bytes, was listed", len(d.Name), maxNameLen)
		}
	}
}

// TestInstalledReadsABoundedTotal lists an environment of three
// distributions whose RECORDs are each at the bound of one file: what one
// listing reads of all files together is bounded too, so the last one read
// names no import (or is left out).
func TestInstalledReadsABoundedTotal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sp := filepath.Join(dir, "lib", "python3.12", "site-packages")
	padding := strings.Repeat("__pycache__/x.pyc,,\n", maxRecordBytes/20+1)
	for _, name := range []string{"one", "two", "three"} {
		info := filepath.Join(sp, name+"-1.0.dist-info")
		if err := os.MkdirAll(info, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(info, "METADATA"), []byte("Name: "+name+"\nVersion: 1.0\n\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(info, "RECORD"), []byte(name+"_mod.py,,\n"+padding), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dists, err := Installed(dir)
	if err != nil {
		t.Fatal(err)
	}
	with := 0
	for _, d := range dists {
		if len(d.Imports) > 0 {
			with++
		}
	}
	if with != 2 {
		t.Errorf("listed %v: want the imports of two distributions, the total read spent before the third's", dists)
	}
}

// TestInstalledStaysInItsEnvironment lists an environment whose packages
// made links out of it and a FIFO (a conda package carries links, a source
// build writes what it likes): the worker reads as root, and must read
// nothing outside the environment nor wait on a FIFO.
func TestInstalledStaysInItsEnvironment(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	sp := filepath.Join(dir, "lib", "python3.12", "site-packages")
	if err := os.MkdirAll(filepath.Join(sp, "fifo-1.0.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "METADATA"), []byte("Name: host-secret\nVersion: 1.0\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "top_level.txt"), []byte("hostsecret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(sp, "evil-1.0.dist-info")); err != nil {
		t.Fatal(err)
	}
	// A directory of its own whose files are links out.
	if err := os.Mkdir(filepath.Join(sp, "links-1.0.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"METADATA", "top_level.txt"} {
		if err := os.Symlink(filepath.Join(outside, name), filepath.Join(sp, "links-1.0.dist-info", name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "METADATA"), filepath.Join(sp, "single-1.0.egg-info")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(sp, "fifo-1.0.dist-info", "METADATA"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan []envspec.Dist, 1)
	go func() {
		dists, err := Installed(dir)
		if err != nil {
			t.Error(err)
		}
		done <- dists
	}()
	select {
	case dists := <-done:
		for _, d := range dists {
			t.Errorf("listed %+v, read through a link out of the environment", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Installed still waits after 10 s (on the FIFO)")
	}
}
