package telemetry

import (
	"testing"
	"time"
)

// BenchmarkJobHooks is what the hooks cost one job, on the worker and the
// frontend together: running gauge, worker counter and two histograms,
// frontend counter, end-to-end histogram and the tenant's two counters.
//
//	go test -run '^$' -bench JobHooks -count 3 ./internal/telemetry
func BenchmarkJobHooks(b *testing.B) {
	enqueued := time.Now()
	for b.Loop() {
		done := JobStarted("default")
		done()
		JobFinished("execute", "ok", "", enqueued, enqueued, time.Millisecond)
		CallFinished("execute", "ok", "acme", enqueued, time.Millisecond)
	}
}
