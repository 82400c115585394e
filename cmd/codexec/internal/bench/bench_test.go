package cli

import (
	"os"
	"os/exec"
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
		if got := percentile(ds, p); got != want {
			t.Errorf("p%d = %v, want %v", p, got, want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("p50 of nothing = %v", got)
	}
	if got := percentile(ds[:1], 99); got != 100 {
		t.Errorf("p99 of one sample = %v", got)
	}
}

func TestShellQuote(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"plain", "with space", "it's", `$(rm -rf /) "x" \ ;`} {
		out, err := exec.Command("bash", "-c", "printf %s "+shellQuote(s)).Output()
		if err != nil {
			t.Skipf("bash: %v", err)
		}
		if string(out) != s {
			t.Errorf("shellQuote(%q) came back as %q", s, out)
		}
	}
}

func TestProcessesCPU(t *testing.T) {
	t.Parallel()
	if got := processesCPU([]int{os.Getpid(), 0, -1}); got < 0 {
		t.Errorf("processesCPU = %v", got)
	}
}
