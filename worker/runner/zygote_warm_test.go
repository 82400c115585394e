package runner

import (
	"context"
	"testing"
)

// WarmCount counts ready zygotes: none before the first Warm, then one per
// key warmed.
func TestPoolWarmCount(t *testing.T) {
	t.Parallel()
	empty := startPool(t, PoolConfig{Preload: testPreload})
	if n := empty.WarmCount(); n != 0 {
		t.Errorf("WarmCount of a new pool = %d, want 0", n)
	}
	pool, _, s := poolSetup(t, PoolConfig{MaxZygotes: 2})
	if n := pool.WarmCount(); n != 1 {
		t.Errorf("WarmCount after one Warm = %d, want 1", n)
	}
	other := s
	other.Preload = []string{"json", "decimal"}
	if err := pool.Warm(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if n := pool.WarmCount(); n != 2 {
		t.Errorf("WarmCount after two keys warmed = %d, want 2", n)
	}
}
