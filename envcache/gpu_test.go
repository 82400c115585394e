package envcache

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/internal/wheeltest"
)

// An environment of CUDA framework wheels is an environment like any
// other: the native libraries its wheels carry (nvidia-*-cu12 wheels put
// hundreds of MiB under site-packages/nvidia/) count in its size, hence in
// the cache's disk budget, and it is evicted under that budget once
// unused. The wheel here carries a 24 MiB library.
func TestCacheBudgetCountsCUDAWheels(t *testing.T) {
	t.Parallel()
	setupUV(t)
	const libSize = 24 << 20
	house := t.TempDir()
	wheeltest.Wheel{Dist: "nvidia-fake-cu12", Version: "12.4", Module: "nvidia_fake", TopLevel: true,
		Extra: [][2]string{{"nvidia_fake/lib/libcudafake.so.12", strings.Repeat("\x7fELF", libSize/4)}}}.Write(t, house)
	wheeltest.Wheel{Dist: "beta", Version: "1.0", Module: "beta", TopLevel: true}.Write(t, house)
	dir := t.TempDir()
	_, _, managers := realManagers(dir)
	c, _ := setupCache(t, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(house), BudgetBytes: 16 << 20})
	gpuEnv := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"nvidia-fake-cu12"}})
	if gpuEnv.SizeBytes < libSize {
		t.Fatalf("the environment measures %d bytes, less than its %d-byte library", gpuEnv.SizeBytes, libSize)
	}
	if u := c.Usage(); u < libSize {
		t.Fatalf("the cache's usage %d does not count the library", u)
	}
	gpuEnv.Release()
	other := ensure(t, c, envspec.Spec{Manager: "uv", Packages: []string{"beta"}})
	defer other.Release()
	if _, err := c.Trim(context.Background()); err != nil {
		t.Fatal(err)
	}
	if held := c.Held(); !slices.Equal(held, []string{other.ID}) {
		t.Errorf("Held = %v after trimming to a 16 MiB budget, want only %s", held, other.ID)
	}
	if _, err := os.Stat(gpuEnv.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the CUDA environment survived the budget: %v", err)
	}
}
