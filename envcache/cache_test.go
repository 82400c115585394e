package envcache

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingManager counts the Create calls of a real manager.
type countingManager struct {
	Manager
	creates atomic.Int32
}

func (m *countingManager) Create(ctx context.Context, dir string, req CreateRequest, progress io.Writer) error {
	m.creates.Add(1)
	return m.Manager.Create(ctx, dir, req, progress)
}

// fakeManager builds stand-in environments in Go, with no Python: a
// directory holding an executable bin/python and a payload of a fixed
// size. It can hold a build until its gate opens, and fail on demand. It
// makes the tests of the cache's own logic (waiters, cancellation,
// eviction order) fast and exact.
type fakeManager struct {
	name    string
	payload int
	gate    chan struct{} // when not nil, Create waits for it (or ctx)
	started chan string   // when not nil, gets the dir when a Create starts
	fail    error         // when not nil, Create returns it
	ended   chan error    // when not nil, gets what each Create returns
	creates atomic.Int32
	seeds   []string // Seed of each Create, under mu
	mu      sync.Mutex
}

func (f *fakeManager) Name() string                                         { return cmpOr(f.name, envspec.ManagerVenv) }
func (f *fakeManager) Available(context.Context) error                      { return nil }
func (f *fakeManager) Python(dir string) string                             { return filepath.Join(dir, "bin", "python") }
func (f *fakeManager) Activation(dir string) Activation                     { return venvActivation(dir) }
func (f *fakeManager) List(context.Context, string) ([]envspec.Dist, error) { return nil, nil }

func (f *fakeManager) Create(ctx context.Context, dir string, req CreateRequest, progress io.Writer) (err error) {
	if f.ended != nil {
		defer func() { f.ended <- err }()
	}
	f.creates.Add(1)
	f.mu.Lock()
	f.seeds = append(f.seeds, req.Seed)
	f.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	if progress != nil {
		fmt.Fprintln(progress, "fake: started")
	}
	if f.started != nil {
		f.started <- dir
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return &BuildError{Dir: dir, Args: []string{"fake"}, Err: ctx.Err()}
		}
	}
	if progress != nil {
		fmt.Fprintln(progress, "fake: finished")
	}
	if f.fail != nil {
		return &BuildError{Dir: dir, Args: []string{"fake", "create"}, Output: "fake installer says no", Err: f.fail}
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "python"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "payload"), bytes.Repeat([]byte("x"), f.payload), 0o644)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// setupCache makes a cache in a new directory; cfg.Dir is set when empty.
// The cache is closed at the end of the test.
func setupCache(tb testing.TB, cfg Config) (*Cache, *testClock) {
	tb.Helper()
	if cfg.Dir == "" {
		cfg.Dir = tb.TempDir()
	}
	if cfg.DefaultPython == "" {
		cfg.DefaultPython = setupPython(tb)
	}
	c, err := New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	clock := &testClock{t: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	c.now = clock.Now
	tb.Cleanup(func() { c.Close() })
	return c, clock
}

// realManagers returns counting uv and venv managers with their caches
// under dir.
func realManagers(dir string) (*countingManager, *countingManager, map[string]Manager) {
	uv := &countingManager{Manager: &UV{CacheDir: filepath.Join(dir, "uv-cache")}}
	venv := &countingManager{Manager: &Venv{PipCacheDir: filepath.Join(dir, "pip-cache")}}
	return uv, venv, map[string]Manager{envspec.ManagerUV: uv, envspec.ManagerVenv: venv}
}

func fakeManagers(f *fakeManager) map[string]Manager { return map[string]Manager{f.Name(): f} }

func ensure(tb testing.TB, c *Cache, spec envspec.Spec) *Env {
	tb.Helper()
	env, err := c.Ensure(context.Background(), spec, nil)
	if err != nil {
		tb.Fatalf("Ensure(%v): %v", spec, err)
	}
	return env
}

func readMeta(tb testing.TB, c *Cache, id string) envMeta {
	tb.Helper()
	data, err := os.ReadFile(c.metaPath(id))
	if err != nil {
		tb.Fatal(err)
	}
	var m envMeta
	if err := json.Unmarshal(data, &m); err != nil {
		tb.Fatal(err)
	}
	return m
}

func inode(tb testing.TB, path string) (uint64, uint64) {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Ino, uint64(st.Nlink)
}

func TestCacheEnsureBuildsOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	setupUV(t)
	dir := t.TempDir()
	uv, _, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(t))})
	spec := envspec.Spec{Manager: "uv", Packages: []string{"alpha"}}

	const n = 8
	envs := make([]*Env, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			envs[i], errs[i] = c.Ensure(context.Background(), spec, nil)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if envs[i].Dir != envs[0].Dir || envs[i].ID != spec.ID() {
			t.Errorf("caller %d got %s (%s), caller 0 %s", i, envs[i].Dir, envs[i].ID, envs[0].Dir)
		}
	}
	if got := uv.creates.Load(); got != 1 {
		t.Errorf("built %d times, want 1", got)
	}
	env := envs[0]
	if got := runPython(t, env.Python, "import alpha, sys; print(alpha.VALUE, sys.prefix)"); got != "alpha 1.0 "+env.Dir {
		t.Errorf("the environment's python printed %q", got)
	}
	if env.Activation.Vars["VIRTUAL_ENV"] != env.Dir || env.SizeBytes <= 0 || env.Existing {
		t.Errorf("Env = %+v", env)
	}
	if held := c.Held(); !slices.Equal(held, []string{env.ID}) {
		t.Errorf("Held = %v", held)
	}
	if e := c.entries(); len(e) != 1 || e[0].InUse != n || e[0].SizeBytes != env.SizeBytes {
		t.Errorf("entries = %+v, want one in use %d times", e, n)
	}
	for _, e := range envs {
		e.Release()
		e.Release() // harmless
	}
	if e := c.entries(); len(e) != 1 || e[0].InUse != 0 {
		t.Errorf("after release, entries = %+v", e)
	}
	// A later call takes it from disk, without building.
	again := ensure(t, c, spec)
	defer again.Release()
	if again.Dir != env.Dir || uv.creates.Load() != 1 {
		t.Errorf("second Ensure: %s, %d builds", again.Dir, uv.creates.Load())
	}
}

// The test binary doubles as a cache user in another process: with
// cacheHelperEnv set, TestMain calls cacheHelper instead of the tests.
const (
	cacheHelperEnv      = "ENVCACHE_TEST_CACHE_DIR"
	cacheHelperHouseEnv = "ENVCACHE_TEST_CACHE_WHEELHOUSE"
)

// cacheHelper waits for its stdin to close (the start signal), then
// ensures the uv environment of alpha in the shared cache directory,
// printing "built" when it built it, then the interpreter's path.
func cacheHelper(dir, house string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	uv, _, managers := realManagers(dir)
	c, err := New(Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(house)})
	if err == nil {
		err = c.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	env, err := c.Ensure(context.Background(), envspec.Spec{Manager: "uv", Packages: []string{"alpha"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Release()
	if env.Built != (uv.creates.Load() > 0) {
		fmt.Fprintf(os.Stderr, "Env.Built = %v after %d builds\n", env.Built, uv.creates.Load())
		return 1
	}
	if env.Built {
		fmt.Println("built")
	}
	fmt.Println(env.Python)
	return 0
}

func TestCacheEnsureBuildsOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	setupUV(t)
	dir, house := t.TempDir(), setupWheelhouse(t)
	want := filepath.Join(dir, "envs", envspec.Spec{Manager: "uv", Packages: []string{"alpha"}}.ID(), "bin", "python")
	builds := buildRace(t, 4, want, cacheHelperEnv+"="+dir, cacheHelperHouseEnv+"="+house)
	if builds != 1 {
		t.Errorf("%d processes built the environment, want exactly 1", builds)
	}
}

func TestCacheRemembersFailure(t *testing.T) {
	t.Parallel()
	setupUV(t)
	dir := t.TempDir()
	uv, _, managers := realManagers(dir)
	c, clock := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(t)), FailureTTL: time.Minute})
	spec := envspec.Spec{Manager: "uv", Packages: []string{"alpha", "not-in-the-wheelhouse"}}

	var progress bytes.Buffer
	_, first := c.Ensure(context.Background(), spec, &syncWriter{w: &progress})
	var be *BuildError
	if !errors.As(first, &be) || !strings.Contains(be.Output, "not-in-the-wheelhouse") {
		t.Fatalf("first Ensure: %v, want a *BuildError with uv's output", first)
	}
	if !strings.Contains(progress.String(), "not-in-the-wheelhouse") {
		t.Errorf("progress did not get the installer's output: %q", progress.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "envs", spec.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed build left its directory: %v", err)
	}

	clock.Advance(30 * time.Second)
	_, second := c.Ensure(context.Background(), spec, nil)
	if !errors.As(second, &be) || !strings.Contains(second.Error(), "failed to build 30s ago") ||
		!strings.Contains(second.Error(), "not-in-the-wheelhouse") {
		t.Errorf("second Ensure: %v, want the remembered failure", second)
	}
	if got := uv.creates.Load(); got != 1 {
		t.Errorf("built %d times within the failure TTL, want 1", got)
	}

	clock.Advance(31 * time.Second)
	if _, err := c.Ensure(context.Background(), spec, nil); !errors.As(err, &be) {
		t.Errorf("third Ensure: %v", err)
	}
	if got := uv.creates.Load(); got != 2 {
		t.Errorf("built %d times after the failure TTL, want 2", got)
	}
	if held := c.Held(); len(held) != 0 {
		t.Errorf("Held = %v after failures", held)
	}
}

func TestCacheWaitersLeaveAndJoin(t *testing.T) {
	t.Parallel()
	f := &fakeManager{gate: make(chan struct{}), started: make(chan string, 4)}
	c, _ := setupCache(t, Config{Managers: fakeManagers(f)})
	joined := make(chan string, 16)
	c.onJoin = func(id string) { joined <- id }
	spec := envspec.Spec{Manager: "venv", Packages: []string{"alpha"}}

	type result struct {
		env *Env
		err error
	}
	call := func(ctx context.Context, w io.Writer) chan result {
		ch := make(chan result, 1)
		go func() {
			env, err := c.Ensure(ctx, spec, w)
			ch <- result{env, err}
		}()
		<-joined
		return ch
	}
	var outA, outB, outC bytes.Buffer
	a := call(context.Background(), &outA)
	<-f.started
	b := call(context.Background(), &outB)
	ctxC, cancelC := context.WithCancel(context.Background())
	cResult := call(ctxC, &outC)
	cancelC()
	if r := <-cResult; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a caller whose ctx ended: %v, want context.Canceled", r.err)
	}
	close(f.gate)
	ra, rb := <-a, <-b
	if ra.err != nil || rb.err != nil {
		t.Fatalf("waiters: %v, %v", ra.err, rb.err)
	}
	defer ra.env.Release()
	defer rb.env.Release()
	if f.creates.Load() != 1 {
		t.Errorf("built %d times, want 1", f.creates.Load())
	}
	// Each caller gets the output from the moment it joined until it left.
	if !strings.Contains(outA.String(), "fake: started\nfake: finished\n") || !strings.HasPrefix(outA.String(), "building "+spec.ID()) ||
		outB.String() != "fake: finished\n" || strings.Contains(outC.String(), "finished") {
		t.Errorf("progress: first %q, joined later %q, left %q", outA.String(), outB.String(), outC.String())
	}
	if e := c.entries(); len(e) != 1 || e[0].InUse != 2 {
		t.Errorf("entries = %+v, want one held twice", e)
	}
}

func TestCacheBuildStopsWhenEveryWaiterLeaves(t *testing.T) {
	t.Parallel()
	f := &fakeManager{gate: make(chan struct{}), started: make(chan string, 4), ended: make(chan error, 4)}
	c, _ := setupCache(t, Config{Managers: fakeManagers(f)})
	spec := envspec.Spec{Manager: "venv", Packages: []string{"alpha"}}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := c.Ensure(ctx, spec, nil)
		errc <- err
	}()
	<-f.started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Ensure: %v, want context.Canceled", err)
	}
	if err := <-f.ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the build went on after its last waiter left: %v", err)
	}
	// The cancelled build is not remembered as a failure: the next call
	// builds again (once the first build has let go of its lock).
	close(f.gate)
	env := ensure(t, c, spec)
	defer env.Release()
	if f.creates.Load() != 2 {
		t.Errorf("built %d times, want 2", f.creates.Load())
	}
}

func TestCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	f := &fakeManager{payload: 100 << 10}
	// The budget is set from the sizes the cache measured of the
	// environments themselves (not from a probe built elsewhere: on ext4
	// a file under writeback can be measured with fewer blocks than it
	// has, and a budget sized from a low measurement evicted nothing).
	// Until then it is large enough for all of them.
	c, clock := setupCache(t, Config{Managers: fakeManagers(f), BudgetBytes: 1 << 40})
	spec := func(pkg string) envspec.Spec { return envspec.Spec{Manager: "venv", Packages: []string{pkg}} }

	a := ensure(t, c, spec("a"))
	clock.Advance(2 * time.Minute)
	b := ensure(t, c, spec("b"))
	clock.Advance(2 * time.Minute)
	cc := ensure(t, c, spec("c"))
	clock.Advance(2 * time.Minute)
	// Room for b and c and half of a: a, the least recently used, goes.
	c.budget.Store(b.SizeBytes + cc.SizeBytes + a.SizeBytes/2)
	if evicted, err := c.Trim(context.Background()); err != nil || len(evicted) != 0 {
		t.Fatalf("Trim with everything in use evicted %v, %v", evicted, err)
	}
	if u, want := c.Usage(), a.SizeBytes+b.SizeBytes+cc.SizeBytes; u != want {
		t.Errorf("Usage = %d, want %d", u, want)
	}
	a.Release()
	b.Release()
	cc.Release()
	if _, err := c.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held, want := c.Held(), sortedIDs(spec("b"), spec("c")); !slices.Equal(held, want) {
		t.Fatalf("Held = %v, want %v (a, the least recently used, evicted)", held, want)
	}
	if _, err := os.Stat(a.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a's directory survived its eviction: %v", err)
	}

	// Using b makes c the least recently used.
	ensure(t, c, spec("b")).Release()
	clock.Advance(2 * time.Minute)
	d := ensure(t, c, spec("d"))
	// Room for b and d and half of c: c goes (a background trim with the
	// budget above may have evicted it already).
	c.budget.Store(b.SizeBytes + d.SizeBytes + cc.SizeBytes/2)
	if _, err := c.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held, want := c.Held(), sortedIDs(spec("b"), spec("d")); !slices.Equal(held, want) {
		t.Fatalf("Held = %v, want %v (c evicted)", held, want)
	}

	// What is in use stays, even far over budget; what another process
	// (another Cache on the same directory) holds stays too.
	other, _ := setupCache(t, Config{Dir: c.cfg.Dir, Managers: fakeManagers(f)})
	bOther := ensure(t, other, spec("b"))
	c.budget.Store(1)
	if evicted, err := c.Trim(context.Background()); err != nil || len(evicted) != 0 {
		t.Errorf("Trim evicted %v (%v); b is held elsewhere and d here", evicted, err)
	}
	bOther.Release()
	d.Release() // the background trim may evict both at once
	if _, err := c.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held := c.Held(); len(held) != 0 {
		t.Errorf("Held = %v after the releases, want none", held)
	}
	if f.creates.Load() != 4 {
		t.Errorf("built %d times, want 4 (a, b, c, d)", f.creates.Load())
	}
}

// Env.Built says whether this call's environment was built for it, from
// what is on disk: not from what this process remembers, so that it stays
// true after a restart (not built) and after an eviction (built again).
func TestCacheEnsureSaysWhetherItBuilt(t *testing.T) {
	t.Parallel()
	f := &fakeManager{payload: 64 << 10}
	// No budget, so that no background trim races the test's own Trim.
	c, _ := setupCache(t, Config{Managers: fakeManagers(f), BudgetBytes: -1})
	spec := envspec.Spec{Manager: "venv", Packages: []string{"a"}}
	check := func(c *Cache, what string, want bool, creates int32) {
		t.Helper()
		env := ensure(t, c, spec)
		defer env.Release()
		if env.Built != want || f.creates.Load() != creates {
			t.Errorf("%s: Built = %v after %d builds, want %v after %d", what, env.Built, f.creates.Load(), want, creates)
		}
	}

	first := ensure(t, c, spec)
	if !first.Built || f.creates.Load() != 1 {
		t.Errorf("first Ensure: Built = %v after %d builds, want true after 1", first.Built, f.creates.Load())
	}
	check(c, "while held here", false, 1)
	first.Release()
	check(c, "taken from disk", false, 1)

	restarted, _ := setupCache(t, Config{Dir: c.cfg.Dir, Managers: fakeManagers(f)})
	check(restarted, "a new cache over the same directory", false, 1)

	c.budget.Store(1)
	if evicted, err := c.Trim(context.Background()); err != nil || !slices.Equal(evicted, []string{spec.ID()}) {
		t.Fatalf("Trim evicted %v, %v; want %s", evicted, err, spec.ID())
	}
	c.budget.Store(-1)
	check(c, "after its eviction", true, 2)
	check(restarted, "after another cache rebuilt it", false, 2)
}

func sortedIDs(specs ...envspec.Spec) []string {
	var ids []string
	for _, s := range specs {
		ids = append(ids, s.ID())
	}
	slices.Sort(ids)
	return ids
}

// Eviction with real environments and a tiny budget: each release leaves
// the cache over budget, and the background trim evicts what is unused.
func TestCacheEvictsRealEnvironments(t *testing.T) {
	t.Parallel()
	setupUV(t)
	dir := t.TempDir()
	uv, _, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(t)), BudgetBytes: 1})
	a := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"alpha"}})
	b := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"beta"}})
	a.Release()
	if _, err := c.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held := c.Held(); !slices.Equal(held, []string{b.ID}) {
		t.Errorf("Held = %v, want only %s", held, b.ID)
	}
	if _, err := os.Stat(a.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a survived: %v", err)
	}
	if got := runPython(t, b.Python, "import beta; print(beta.VALUE)"); got != "beta 2.0" {
		t.Errorf("b prints %q", got)
	}
	// An evicted environment is rebuilt on demand.
	a = ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"alpha"}})
	defer a.Release()
	defer b.Release()
	if got := runPython(t, a.Python, "import alpha; print(alpha.VALUE)"); got != "alpha 1.0" || uv.creates.Load() != 3 {
		t.Errorf("rebuilt a prints %q after %d builds", got, uv.creates.Load())
	}
}

func TestCacheDeriveUVLinksFromTheSharedCache(t *testing.T) {
	t.Parallel()
	setupUV(t)
	dir := t.TempDir()
	uv, _, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(t))})
	parentSpec := envspec.Spec{Manager: "uv", Packages: []string{"alpha", "beta==1.0"}}
	parent := ensure(t, c, parentSpec)
	defer parent.Release()

	childSpec, err := envspec.Derive(parentSpec, []string{"beta==2.0", "scikit-fake"})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	child := ensure(t, c, childSpec)
	defer child.Release()
	t.Logf("derived uv environment built in %v", time.Since(begin))
	if got := runPython(t, child.Python, "import alpha, beta, skfake; print(alpha.VALUE, beta.VALUE)"); got != "alpha 1.0 beta 2.0" {
		t.Errorf("child prints %q", got)
	}
	if got := runPython(t, parent.Python, "import beta; print(beta.VALUE)"); got != "beta 1.0" {
		t.Errorf("the parent changed: %q", got)
	}
	rel := filepath.Join("alpha", "__init__.py")
	pIno, _ := inode(t, filepath.Join(sitePackagesDirs(parent.Dir)[0], rel))
	cIno, links := inode(t, filepath.Join(sitePackagesDirs(child.Dir)[0], rel))
	if pIno != cIno || links < 3 {
		t.Errorf("alpha/__init__.py: parent inode %d, child inode %d with %d links; want one file linked from uv's cache", pIno, cIno, links)
	}
	if uv.creates.Load() != 2 || child.Spec.Parent != parent.ID {
		t.Errorf("%d builds; child's parent %q", uv.creates.Load(), child.Spec.Parent)
	}
}

func TestCacheDeriveVenvFromSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("ensurepip takes seconds")
	}
	t.Parallel()
	dir := t.TempDir()
	_, venv, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(t))})
	parentSpec := envspec.Spec{Manager: "venv", Packages: []string{"alpha"}}
	parent := ensure(t, c, parentSpec)
	childSpec, err := envspec.Derive(parentSpec, []string{"beta"})
	if err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	child := ensure(t, c, childSpec)
	defer child.Release()
	t.Logf("derived venv built from its parent in %v", time.Since(begin))

	if m := readMeta(t, c, child.ID); m.Seed != parent.ID {
		t.Errorf("the child was not seeded from its parent: seed %q", m.Seed)
	}
	rel := filepath.Join("alpha", "__init__.py")
	pIno, _ := inode(t, filepath.Join(sitePackagesDirs(parent.Dir)[0], rel))
	cIno, _ := inode(t, filepath.Join(sitePackagesDirs(child.Dir)[0], rel))
	if pIno != cIno {
		t.Errorf("alpha/__init__.py was copied, not linked")
	}
	pip, err := os.ReadFile(filepath.Join(child.Dir, "bin", "pip"))
	if err != nil || !bytes.HasPrefix(pip, []byte("#!"+child.Dir+"/bin/python")) {
		t.Errorf("the child's bin/pip names %q, want the child's interpreter", firstLines(string(pip), 1))
	}

	// The parent goes; the child keeps working, pip included.
	c.budget.Store(1)
	parent.Release() // the background trim may evict it at once
	if _, err := c.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held := c.Held(); !slices.Equal(held, []string{child.ID}) {
		t.Fatalf("Held = %v, want only the child", held)
	}
	if got := runPython(t, child.Python, "import alpha, beta, gamma; print(alpha.VALUE, beta.VALUE)"); got != "alpha 1.0 beta 2.0" {
		t.Errorf("child prints %q", got)
	}
	out, err := exec.Command(filepath.Join(child.Dir, "bin", "pip"), "list", "--format=freeze", "--disable-pip-version-check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "alpha==1.0") || !strings.Contains(string(out), "beta==2.0") {
		t.Errorf("the child's pip list: %v\n%s", err, out)
	}
	if venv.creates.Load() != 2 {
		t.Errorf("built %d times", venv.creates.Load())
	}
}

func TestCacheSeedsOnlyFromAMatchingParent(t *testing.T) {
	t.Parallel()
	f := &fakeManager{}
	c, _ := setupCache(t, Config{Managers: fakeManagers(f)})
	parentSpec := envspec.Spec{Manager: "venv", Packages: []string{"alpha"}}
	ensure(t, c, parentSpec).Release()
	child, err := envspec.Derive(parentSpec, []string{"beta"})
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, c, child).Release()
	// A parent that is not here: built from scratch.
	orphan := envspec.Spec{Manager: "venv", Packages: []string{"gamma"}, Parent: envspec.Spec{Manager: "venv", Packages: []string{"zeta"}}.ID()}
	ensure(t, c, orphan).Release()
	f.mu.Lock()
	defer f.mu.Unlock()
	parentDir := filepath.Join(c.envsDir, parentSpec.ID())
	if !slices.Equal(f.seeds, []string{"", parentDir, ""}) {
		t.Errorf("seeds = %q, want none, the parent, none", f.seeds)
	}
}

func TestCacheRebuildsABrokenEnvironment(t *testing.T) {
	t.Parallel()
	f := &fakeManager{}
	c, _ := setupCache(t, Config{Managers: fakeManagers(f)})
	env := ensure(t, c, envspec.Spec{Manager: "venv"})
	env.Release()
	if err := os.Remove(env.Python); err != nil {
		t.Fatal(err)
	}
	again := ensure(t, c, envspec.Spec{Manager: "venv"})
	defer again.Release()
	if _, err := os.Stat(again.Python); err != nil || f.creates.Load() != 2 {
		t.Errorf("after its interpreter went: %v, %d builds", err, f.creates.Load())
	}
}

func TestCacheExistingEnvironments(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	f := &fakeManager{}
	c, _ := setupCache(t, Config{Managers: map[string]Manager{envspec.ManagerVenv: &Venv{}, envspec.ManagerUV: &UV{}}})
	venvDir := filepath.Join(t.TempDir(), "operators-venv")
	var builds atomic.Int32
	if _, err := ensureVenv(context.Background(), venvDir, py, fastBuild(&builds)); err != nil {
		t.Fatal(err)
	}
	spec := envspec.Spec{Manager: "uv", Existing: venvDir}
	env := ensure(t, c, spec)
	env.Release()
	if !env.Existing || env.Dir != venvDir || env.Python != filepath.Join(venvDir, "bin", "python") || env.Activation.Vars["VIRTUAL_ENV"] != venvDir {
		t.Errorf("Env = %+v", env)
	}
	if held := c.Held(); !slices.Equal(held, []string{spec.ID()}) {
		t.Errorf("Held = %v, want the existing environment", held)
	}
	_, err := c.Ensure(context.Background(), envspec.Spec{Manager: "venv", Existing: filepath.Join(venvDir, "missing")}, nil)
	if !errors.Is(err, ErrNotVenv) {
		t.Errorf("a missing existing venv: %v", err)
	}
	_, err = c.Ensure(context.Background(), envspec.Spec{Manager: "venv", Existing: venvDir, Packages: []string{"six"}}, nil)
	if !errors.Is(err, envspec.ErrExistingEnv) {
		t.Errorf("packages on an existing venv: %v", err)
	}
	if f.creates.Load() != 0 || builds.Load() != 1 {
		t.Error("something was built")
	}
}

func TestCacheRefusals(t *testing.T) {
	t.Parallel()
	f := &fakeManager{}
	c, _ := setupCache(t, Config{Managers: fakeManagers(f)})
	for _, tt := range []struct {
		spec envspec.Spec
		is   error
		says string
	}{
		{envspec.Spec{Manager: "venv", Packages: []string{"pkg @ https://example.com/p.whl"}}, envspec.ErrBadRequirement, "not allowed here"},
		{envspec.Spec{Manager: "venv", Packages: []string{"--index-url=https://evil"}}, envspec.ErrBadRequirement, "options"},
		{envspec.Spec{Manager: "conda"}, nil, "the conda manager is not configured"},
		{envspec.Spec{Manager: "pip"}, envspec.ErrBadSpec, "unknown manager"},
	} {
		_, err := c.Ensure(context.Background(), tt.spec, nil)
		if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("Ensure(%+v): %v, want an error saying %q", tt.spec, err, tt.says)
		}
	}
	if f.creates.Load() != 0 {
		t.Error("a refused spec was built")
	}
	c.Close()
	if _, err := c.Ensure(context.Background(), envspec.Spec{Manager: "venv"}, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Ensure after Close: %v", err)
	}
	if _, err := New(Config{Dir: "relative"}); err == nil {
		t.Error("New with a relative Dir: no error")
	}
	if _, err := New(Config{Dir: t.TempDir(), Managers: map[string]Manager{"uv": &Venv{}}}); err == nil {
		t.Error("New with a manager under the wrong name: no error")
	}
}

func TestCacheSweepsLeftovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	half := filepath.Join(dir, "envs", "env-0123456789abcdef")
	orphanMeta := filepath.Join(dir, "meta", "env-fedcba9876543210.json")
	trash := filepath.Join(dir, "trash", "env-x-123", "env")
	for _, d := range []string{filepath.Join(half, "lib"), trash, filepath.Dir(orphanMeta)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(orphanMeta, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Dir: dir, Managers: fakeManagers(&fakeManager{})})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Close() // waits for the sweep
	for _, p := range []string{half, orphanMeta, filepath.Dir(trash)} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the sweep: %v", p, err)
		}
	}
}

func TestCacheDefaults(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Config{Dir: dir}.WithDefaults()
	if cfg.BudgetBytes != 20<<30 || cfg.FailureTTL != 2*time.Minute || cfg.DefaultPython != "python3" || cfg.Logger == nil {
		t.Errorf("WithDefaults = %+v", cfg)
	}
	uv, ok := cfg.Managers[envspec.ManagerUV].(*UV)
	if !ok || uv.CacheDir != filepath.Join(dir, "uv-cache") {
		t.Errorf("default uv manager = %+v", cfg.Managers[envspec.ManagerUV])
	}
	if _, ok := cfg.Managers[envspec.ManagerConda].(*Conda); !ok {
		t.Error("no default conda manager")
	}
}

func TestCacheCapabilities(t *testing.T) {
	t.Parallel()
	py := setupPython(t)
	want, err := interpreterVersion(py)
	if err != nil {
		t.Fatal(err)
	}
	missing := &Conda{Bin: "/nonexistent/conda"}
	c, _ := setupCache(t, Config{DefaultPython: py, Managers: map[string]Manager{envspec.ManagerVenv: &Venv{}, envspec.ManagerConda: missing}})
	caps := c.Capabilities(context.Background(), []string{"9.99"})
	if !slices.Equal(caps.Managers, []string{"venv"}) || !slices.Equal(caps.Pythons, []string{want}) {
		t.Errorf("envspec.Capabilities = %+v, want venv and Python %s", caps, want)
	}
	if got := compareVersions("3.10.1", "3.9.18"); got <= 0 {
		t.Errorf("compareVersions(3.10.1, 3.9.18) = %d", got)
	}
}

// probeURL makes one request with a client of its own, whose connections
// are closed after it (goleak checks that nothing outlives the tests).
func probeURL(req *http.Request) (*http.Response, error) {
	tr := &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DisableKeepAlives: true,
		// HTTP/1 only: an HTTP/2 connection's reader outlives the request.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return resp, err
}

// TestCachePyPI installs a real package from PyPI. Without CI=true it skips
// when PyPI cannot be reached; in CI it fails.
func TestCachePyPI(t *testing.T) {
	t.Parallel()
	setupUV(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://pypi.org/simple/iniconfig/", nil)
	resp, err := probeURL(req)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %s", resp.Status)
		}
	}
	requireTool(t, "PyPI (https://pypi.org)", err)

	dir := t.TempDir()
	_, _, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers})
	env, err := c.Ensure(context.Background(), envspec.Spec{Manager: "uv", Packages: []string{"iniconfig>=1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Release()
	if got := runPython(t, env.Python, "import iniconfig; print(iniconfig.__name__)"); got != "iniconfig" {
		t.Errorf("import iniconfig printed %q", got)
	}
	dists, err := Installed(env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if d, ok := envspec.Lookup(dists, "iniconfig"); !ok || d.Version == "" {
		t.Errorf("envspec.Lookup(iniconfig) = %+v, %v", d, ok)
	}
}

// A requirement whose marker is false for the interpreter would install
// nothing (uv skips it): the build is refused, saying so, before uv runs,
// and no environment is made; one whose marker is true is installed.
func TestCacheRefusesARequirementWhoseMarkerIsFalse(t *testing.T) {
	t.Parallel()
	setupUV(t)
	dir := t.TempDir()
	uv, _, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(t))})
	parentSpec := envspec.Spec{Manager: "uv", Packages: []string{"beta==1.0"}}
	parent := ensure(t, c, parentSpec)
	defer parent.Release()
	for _, extra := range []string{`alpha ; extra == 'x'`, `alpha ; python_version < '3'`, `alpha ; sys_platform == 'win32'`} {
		child, err := envspec.Derive(parentSpec, []string{extra})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Ensure(context.Background(), child, nil)
		if !errors.Is(err, envspec.ErrMarkerFalse) || !strings.Contains(err.Error(), "does not apply here") {
			t.Errorf("%s: %v, want ErrMarkerFalse", extra, err)
		}
	}
	if n := uv.creates.Load(); n != 1 {
		t.Errorf("%d uv builds, want the parent's only", n)
	}
	child, err := envspec.Derive(parentSpec, []string{`alpha ; python_version >= '3' and extra != 'x' and sys_platform == 'linux'`})
	if err != nil {
		t.Fatal(err)
	}
	env := ensure(t, c, child)
	defer env.Release()
	if got := runPython(t, env.Python, "import alpha; print(alpha.VALUE)"); got != "alpha 1.0" {
		t.Errorf("alpha under a true marker: %q", got)
	}
}

// A remembered failure goes once its time is over, whether or not its spec
// is asked for again: a failure used to be removed only by another Ensure
// of the same spec, so each distinct spec that failed once (a caller
// asking for nonexistent-1, nonexistent-2, ...) stayed in the worker's
// memory, with the installer's output, for as long as it ran.
func TestCacheForgetsOldFailures(t *testing.T) {
	t.Parallel()
	f := &fakeManager{fail: errors.New("no such package")}
	c, clock := setupCache(t, Config{Managers: fakeManagers(f), FailureTTL: time.Minute})
	for i := range 50 {
		spec := envspec.Spec{Manager: "venv", Packages: []string{fmt.Sprintf("nonexistent-%d", i)}}
		if _, err := c.Ensure(context.Background(), spec, nil); err == nil {
			t.Fatalf("Ensure of %v succeeded", spec.Packages)
		}
	}
	clock.Advance(2 * time.Minute)
	if _, err := c.Ensure(context.Background(), envspec.Spec{Manager: "venv", Packages: []string{"nonexistent-last"}}, nil); err == nil {
		t.Fatal("the last Ensure succeeded")
	}
	c.mu.Lock()
	n := len(c.failures)
	c.mu.Unlock()
	if n != 1 {
		t.Errorf("%d failures remembered, 2 minutes after 50 of them with a ttl of 1 minute; want 1, the last", n)
	}
}
