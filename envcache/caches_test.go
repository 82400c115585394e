package envcache

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/internal/wheeltest"
)

// The installers' caches are emptied after a build once the files only
// they hold pass their budget, and what uv linked from them into an
// environment stays. They used to grow with every package ever installed,
// until the disk that also holds the sessions' files was full.
func TestInstallerCachesEmptiedPastTheirBudget(t *testing.T) {
	t.Parallel()
	setupUV(t)
	house := t.TempDir()
	wheeltest.Wheel{Dist: "beta", Version: "1.0", Module: "beta", TopLevel: true}.Write(t, house)
	wheeltest.Wheel{Dist: "gamma", Version: "1.0", Module: "gamma", TopLevel: true}.Write(t, house)
	dir := t.TempDir()
	uvCache := filepath.Join(dir, "uv-cache")
	c, _ := setupCache(t, Config{Dir: dir, Index: wheelhouseIndex(house), InstallerCacheBytes: 1,
		Managers: map[string]Manager{envspec.ManagerUV: &UV{CacheDir: uvCache}}})
	env := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"beta"}})
	defer env.Release()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(uvCache); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			n, _ := ownBytes(uvCache)
			t.Fatalf("uv's cache, %d bytes of its own over a 1-byte budget, is still there 30 s after the build", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if out, err := exec.Command(filepath.Join(env.Dir, "bin", "python"), "-c", "import beta").CombinedOutput(); err != nil {
		t.Fatalf("the environment lost its package with the cache: %v\n%s", err, out)
	}
	// The next build makes the cache again.
	other := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"gamma"}})
	other.Release()
}

// A build in progress keeps the caches: emptying waits for a later call.
func TestInstallerCachesKeptWhileABuildRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pipCache := filepath.Join(dir, "pip-cache")
	if err := os.MkdirAll(filepath.Join(pipCache, "http"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pipCache, "http", "entry"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	c, _ := setupCache(t, Config{Dir: dir, InstallerCacheBytes: 4 << 10,
		Managers: map[string]Manager{envspec.ManagerVenv: &Venv{PipCacheDir: pipCache}}})
	release, err := c.holdInstallerCaches(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n, err := c.PruneInstallerCaches(context.Background()); err != nil || n != 0 {
		t.Fatalf("PruneInstallerCaches during a build = %d, %v; want 0, nil", n, err)
	}
	if _, err := os.Stat(pipCache); err != nil {
		t.Fatalf("the cache was emptied under a build: %v", err)
	}
	release()
	if n, err := c.PruneInstallerCaches(context.Background()); err != nil || n < 64<<10 {
		t.Fatalf("PruneInstallerCaches after the build = %d, %v; want at least %d", n, err, 64<<10)
	}
	if _, err := os.Stat(pipCache); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cache over its budget is still there: %v", err)
	}
}

// Files linked into an environment too do not count: removing the cache
// would not free them.
func TestOwnBytesSkipsLinkedFiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "own"), make([]byte, 64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shared"), make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "shared"), filepath.Join(t.TempDir(), "link")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	n, err := ownBytes(dir)
	if err != nil || n < 64<<10 || n >= 256<<10 {
		t.Fatalf("ownBytes = %d, %v; want the 64 KiB file only", n, err)
	}
	if n, err := ownBytes(filepath.Join(dir, "missing")); err != nil || n != 0 {
		t.Fatalf("ownBytes of a missing directory = %d, %v", n, err)
	}
}
