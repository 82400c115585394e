package gpu

import (
	"bufio"
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PeakInterval is how often a GPU job's memory is sampled.
const PeakInterval = 500 * time.Millisecond

// WatchPeak samples, with nvidia-smi (smi; "" reports nothing), the memory
// the processes on the devices uuids use together: once at once, then
// every interval until the returned stop is called. stop waits for the
// sample under way (so at least one is taken) and returns the largest sum
// seen, in MiB, and whether the driver answered at all. A device is
// leased to one job at a time, so whatever runs on it is the job's.
func WatchPeak(smi string, uuids []string, interval time.Duration) (stop func() (peakMB int64, reported bool)) {
	if smi == "" || len(uuids) == 0 {
		return func() (int64, bool) { return 0, false }
	}
	quit, done := make(chan struct{}), make(chan struct{})
	var peak int64
	var reported bool
	go func() {
		defer close(done)
		t := time.NewTimer(interval)
		defer t.Stop()
		for {
			if used, ok := sampleUsed(context.Background(), smi, uuids); ok {
				reported = true
				peak = max(peak, used)
			}
			select {
			case <-quit:
				return
			case <-t.C:
				t.Reset(interval)
			}
		}
	}()
	return func() (int64, bool) {
		close(quit)
		<-done
		return peak, reported
	}
}

// sampleUsed asks nvidia-smi for the compute processes and sums the
// memory of those on uuids.
func sampleUsed(ctx context.Context, smi string, uuids []string) (int64, bool) {
	out, err := runSMI(ctx, 5*time.Second, smi, "--query-compute-apps=gpu_uuid,used_memory", "--format=csv,noheader,nounits")
	if err != nil {
		return 0, false
	}
	var used int64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		uuid, mem, ok := strings.Cut(sc.Text(), ",")
		if !ok || !slices.Contains(uuids, strings.TrimSpace(uuid)) {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(mem), 10, 64); err == nil {
			used += n
		}
	}
	return used, true
}
