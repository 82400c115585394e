package e2e

import (
	"slices"
	"time"
)

// Percentile is the nearest-rank p-th percentile of ds in milliseconds,
// rounded to 2 decimals; 0 for no samples.
func Percentile(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	i = min(max(i-1, 0), len(s)-1)
	return Round2(float64(s[i].Microseconds()) / 1000)
}

// Round2 rounds x to 2 decimals.
func Round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
