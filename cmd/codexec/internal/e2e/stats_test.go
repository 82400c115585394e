package e2e

import (
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[int]float64{50: 50, 90: 90, 99: 99, 100: 100} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("p%d = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
	if got := Percentile(ds[:1], 99); got != 100 {
		t.Errorf("p99 of one sample = %v", got)
	}
}
