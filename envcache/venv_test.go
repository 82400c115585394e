package envcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// The test binary doubles as a helper process for the multi-process test:
// with these variables set it calls ensureVenv once and exits.
const (
	helperDirEnv    = "ENVCACHE_TEST_HELPER_DIR"
	helperPythonEnv = "ENVCACHE_TEST_HELPER_PYTHON"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		os.Exit(ensureHelper(dir, os.Getenv(helperPythonEnv)))
	}
	if dir := os.Getenv(cacheHelperEnv); dir != "" {
		os.Exit(cacheHelper(dir, os.Getenv(cacheHelperHouseEnv)))
	}
	// Every cache a test opens is closed, and with it every build and
	// background eviction: nothing may outlive the tests.
	goleak.VerifyTestMain(m)
}

// ensureHelper waits for its stdin to close, the start signal shared by all
// helpers, then builds or reuses the venv, printing "built" when it built.
func ensureHelper(dir, python string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	py, err := ensureVenv(context.Background(), dir, python, venvOptions{
		withoutPip: true,
		onBuild:    func() { fmt.Println("built") },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(py)
	return 0
}

// buildRace starts n copies of this test binary, with env added to their
// environment, that each build or reuse one environment (see TestMain);
// it releases them at once by closing their stdin, and checks that each
// exits 0 having printed interpreter, the environment's python, last. It
// returns how many printed "built" first: how many built.
func buildRace(t *testing.T, n int, interpreter string, env ...string) (builds int) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmds := make([]*exec.Cmd, n)
	stdins := make([]io.WriteCloser, n)
	outs := make([]bytes.Buffer, n)
	for i := range n {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
		if stdins[i], err = cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for _, w := range stdins {
		w.Close() // go
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper %d: %v\n%s", i, err, outs[i].String())
			continue
		}
		lines := strings.Fields(outs[i].String())
		if len(lines) == 0 || lines[len(lines)-1] != interpreter {
			t.Errorf("helper %d printed %q, want %s", i, outs[i].String(), interpreter)
		}
		if len(lines) > 0 && lines[0] == "built" {
			builds++
		}
	}
	return builds
}

// python is the real interpreter behind python3 on PATH.
var python = sync.OnceValues(func() (string, error) { return ResolvePython("python3") })

func setupPython(tb testing.TB) string {
	tb.Helper()
	p, err := python()
	if err != nil {
		tb.Skipf("no python3 to build venvs with: %v", err)
	}
	return p
}

// fastBuild skips pip and counts the builds.
func fastBuild(builds *atomic.Int32) venvOptions {
	return venvOptions{withoutPip: true, onBuild: func() { builds.Add(1) }}
}

// fakeInterpreter writes an executable shell script standing in for python.
func fakeInterpreter(tb testing.TB, path, body string) string {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		tb.Fatal(err)
	}
	return path
}

func TestEnsureVenvBuildsOnce(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	dir := filepath.Join(t.TempDir(), "cache", "default") // parents are created
	var builds atomic.Int32
	ctx := context.Background()

	got, err := ensureVenv(ctx, dir, py, fastBuild(&builds))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "bin", "python"); got != want {
		t.Errorf("EnsureVenv = %s, want %s", got, want)
	}
	out, err := exec.Command(got, "-c", "import sys; print(sys.prefix)").Output()
	if err != nil || strings.TrimSpace(string(out)) != dir {
		t.Errorf("the venv's python has prefix %q (%v), want %s", out, err, dir)
	}
	for _, name := range []string{readyMarker} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s missing after the build: %v", name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, buildingMarker)); err == nil {
		t.Errorf("%s left behind after a successful build", buildingMarker)
	}

	again, err := ensureVenv(ctx, dir, py, fastBuild(&builds))
	if err != nil || again != got {
		t.Errorf("second call: %s, %v; want %s", again, err, got)
	}
	if n := builds.Load(); n != 1 {
		t.Errorf("built %d times, want 1", n)
	}
	if p, err := ExistingVenv(dir); err != nil || p != got {
		t.Errorf("ExistingVenv = %s, %v; want %s", p, err, got)
	}
}

// The exported EnsureVenv builds a full venv, pip included: installing
// packages into it is what comes next.
func TestEnsureVenvWithPip(t *testing.T) {
	if testing.Short() {
		t.Skip("ensurepip takes seconds")
	}
	t.Parallel()
	py := setupPython(t)
	dir := filepath.Join(t.TempDir(), "default")
	got, err := EnsureVenv(context.Background(), dir, py)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(got, "-m", "pip", "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), dir) {
		t.Errorf("pip in the venv: %s (%v)", out, err)
	}
}

func TestEnsureVenvConcurrentGoroutines(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	dir := filepath.Join(t.TempDir(), "venv")
	var builds atomic.Int32
	const n = 8
	start := make(chan struct{})
	results := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = ensureVenv(context.Background(), dir, py, fastBuild(&builds))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || results[i] != filepath.Join(dir, "bin", "python") {
			t.Errorf("goroutine %d: %s, %v", i, results[i], errs[i])
		}
	}
	if got := builds.Load(); got != 1 {
		t.Errorf("built %d times, want exactly 1", got)
	}
}

func TestEnsureVenvConcurrentProcesses(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	dir := filepath.Join(t.TempDir(), "venv")
	builds := buildRace(t, 4, filepath.Join(dir, "bin", "python"), helperDirEnv+"="+dir, helperPythonEnv+"="+py)
	if builds != 1 {
		t.Errorf("%d processes built the venv, want exactly 1", builds)
	}
}

func TestEnsureVenvRedoesInterruptedBuild(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	dir := filepath.Join(t.TempDir(), "venv")
	// What a build killed halfway leaves: the building marker and some files.
	if err := os.MkdirAll(filepath.Join(dir, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{buildingMarker, "pyvenv.cfg", "lib/half-written.py"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var builds atomic.Int32
	if _, err := ensureVenv(context.Background(), dir, py, fastBuild(&builds)); err != nil {
		t.Fatal(err)
	}
	if builds.Load() != 1 {
		t.Errorf("built %d times, want 1", builds.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, "lib", "half-written.py")); err == nil {
		t.Error("the remains of the interrupted build were not removed")
	}
}

func TestEnsureVenvRefusesForeignDirectory(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	dir := t.TempDir()
	precious := filepath.Join(dir, "precious.txt")
	if err := os.WriteFile(precious, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	var builds atomic.Int32
	_, err := ensureVenv(context.Background(), dir, py, fastBuild(&builds))
	if !errors.Is(err, ErrNotManaged) {
		t.Errorf("err = %v, want ErrNotManaged", err)
	}
	if _, err := os.Stat(precious); err != nil || builds.Load() != 0 {
		t.Errorf("EnsureVenv touched a directory it did not build (builds %d, %v)", builds.Load(), err)
	}
}

func TestEnsureVenvReadyButBroken(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	dir := filepath.Join(t.TempDir(), "venv")
	var builds atomic.Int32
	if _, err := ensureVenv(context.Background(), dir, py, fastBuild(&builds)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "pyvenv.cfg")); err != nil {
		t.Fatal(err)
	}
	_, err := ensureVenv(context.Background(), dir, py, fastBuild(&builds))
	if !errors.Is(err, ErrNotVenv) || !strings.Contains(err.Error(), "pyvenv.cfg") {
		t.Errorf("err = %v, want ErrNotVenv naming pyvenv.cfg", err)
	}
	if builds.Load() != 1 {
		t.Errorf("a venv in use was rebuilt")
	}
}

func TestEnsureVenvBuildError(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	broken := fakeInterpreter(t, filepath.Join(tmp, "bin", "python3"), `
echo "creating venv in $3"
echo "Error: Command '[..., '-m', 'ensurepip']' returned non-zero exit status 1." >&2
exit 1
`)
	dir := filepath.Join(tmp, "venv")
	_, err := EnsureVenv(context.Background(), dir, broken)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BuildError", err)
	}
	for _, want := range []string{"creating venv in " + dir, "returned non-zero exit status 1", "exit status 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not show %q:\n%v", want, err)
		}
	}
	if be.Dir != dir || be.Args[0] != broken || be.Args[len(be.Args)-1] != dir {
		t.Errorf("BuildError = %+v", be)
	}

	// The failed build is redone by the next call.
	py := setupPython(t)
	var builds atomic.Int32
	if _, err := ensureVenv(context.Background(), dir, py, fastBuild(&builds)); err != nil || builds.Load() != 1 {
		t.Errorf("rebuild after a failure: %v, %d builds", err, builds.Load())
	}
}

func TestEnsureVenvBuildOutputIsCapped(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	chatty := fakeInterpreter(t, filepath.Join(tmp, "python3"), `
echo FIRST-LINE
i=0
while [ $i -lt 3000 ]; do
  echo "collecting something-or-other, a line of about sixty bytes"
  i=$((i+1))
done
echo LAST-LINE >&2
exit 2
`)
	_, err := EnsureVenv(context.Background(), filepath.Join(tmp, "venv"), chatty)
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BuildError", err)
	}
	if len(be.Output) > 64<<10+100 {
		t.Errorf("kept %d bytes of output, want about 64 KiB at most", len(be.Output))
	}
	if !strings.HasPrefix(be.Output, "FIRST-LINE") || !strings.Contains(be.Output, "LAST-LINE") || !strings.Contains(be.Output, "bytes omitted") {
		t.Errorf("the output must keep its head and its tail and say what was omitted")
	}
}

func TestEnsureVenvWaitsForLockUnderContext(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "venv")
	unlock, err := lockFile(context.Background(), filepath.Join(parent, ".venv.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var builds atomic.Int32
	if _, err := ensureVenv(ctx, dir, py, fastBuild(&builds)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want context.DeadlineExceeded while another builder holds the lock", err)
	}
	if builds.Load() != 0 {
		t.Error("built without the lock")
	}
}

// Cancelling ctx during a build kills the installer and everything it
// started, and the next call starts over.
func TestEnsureVenvCancelDuringBuild(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	fifo := filepath.Join(tmp, "started")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The background sleep holds the output pipe: only a group kill frees it
	// before the WaitDelay backstop.
	slow := fakeInterpreter(t, filepath.Join(tmp, "python3"), fmt.Sprintf(`
sleep 100 &
echo started > %q
wait
`, fifo))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		if data, err := os.ReadFile(fifo); err == nil && len(data) > 0 {
			cancel()
		}
	}()
	dir := filepath.Join(tmp, "venv")
	began := time.Now()
	_, err := EnsureVenv(ctx, dir, slow)
	var be *BuildError
	if !errors.Is(err, context.Canceled) || !errors.As(err, &be) {
		t.Fatalf("err = %v, want a *BuildError wrapping context.Canceled", err)
	}
	if elapsed := time.Since(began); elapsed > 4*time.Second {
		t.Errorf("EnsureVenv returned %v after cancellation began; the installer's group was not killed", elapsed)
	}

	py := setupPython(t)
	var builds atomic.Int32
	if _, err := ensureVenv(context.Background(), dir, py, fastBuild(&builds)); err != nil || builds.Load() != 1 {
		t.Errorf("rebuild after cancellation: %v, %d builds", err, builds.Load())
	}
}

func TestExistingVenv(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()

	fake := filepath.Join(tmp, "fake")
	fakeInterpreter(t, filepath.Join(fake, "bin", "python"), "exit 0\n")
	if err := os.WriteFile(filepath.Join(fake, "pyvenv.cfg"), []byte("home = /usr/bin\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ExistingVenv(fake); err != nil || got != filepath.Join(fake, "bin", "python") {
		t.Errorf("ExistingVenv(a venv) = %s, %v", got, err)
	}

	dangling := filepath.Join(tmp, "dangling")
	if err := os.MkdirAll(filepath.Join(dangling, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dangling, "pyvenv.cfg"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("python3", filepath.Join(dangling, "bin", "python")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent/python3.99", filepath.Join(dangling, "bin", "python3")); err != nil {
		t.Fatal(err)
	}

	noPython := filepath.Join(tmp, "nopython")
	if err := os.MkdirAll(noPython, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(noPython, "pyvenv.cfg"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name, dir, says string
	}{
		{"plain directory", t.TempDir(), "no pyvenv.cfg"},
		{"missing", filepath.Join(tmp, "missing"), "does not exist"},
		{"file", file, "not a directory"},
		{"no bin/python", noPython, "no bin/python"},
		{"base interpreter gone", dangling, "/nonexistent/python3.99, which is gone"},
		{"empty", "", "no directory"},
	} {
		_, err := ExistingVenv(tt.dir)
		if !errors.Is(err, ErrNotVenv) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: err = %v, want ErrNotVenv saying %q", tt.name, err, tt.says)
		}
	}
}

func TestCappedOutput(t *testing.T) {
	t.Parallel()
	var o cappedOutput
	o.Write([]byte("short"))
	if o.String() != "short" {
		t.Errorf("String = %q", o.String())
	}

	var big cappedOutput
	line := bytes.Repeat([]byte("x"), 1000)
	big.Write([]byte("HEAD"))
	for range 500 {
		big.Write(line)
	}
	big.Write([]byte("TAIL"))
	s := big.String()
	if len(s) > outputHeadMax+outputTailMax+64 || !strings.HasPrefix(s, "HEAD") || !strings.HasSuffix(s, "TAIL") {
		t.Errorf("len %d, head %q, tail %q", len(s), s[:8], s[len(s)-8:])
	}
	wantOmitted := fmt.Sprintf("[... %d bytes omitted ...]", 500*1000+8-outputHeadMax-outputTailMax)
	if !strings.Contains(s, wantOmitted) {
		t.Errorf("output does not say %q", wantOmitted)
	}
}
