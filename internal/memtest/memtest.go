// Package memtest measures what a piece of code holds in the heap, for
// tests that bound the memory a hostile input can make the worker hold.
package memtest

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// PeakHeap runs f and returns the most heap its objects took meanwhile
// over what they took before, sampled every 100 µs with the collector
// made eager, so that what is held shows and garbage does not.
func PeakHeap(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 { metrics.Read(sample); return sample[0].Value.Uint64() }
	runtime.GC()
	before := read()
	var peak atomic.Uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if v := read(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
		}
	}()
	f()
	close(done)
	<-stopped
	if p := peak.Load(); p > before {
		return p - before
	}
	return 0
}
