package worker

import (
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/worker/cgroup"
)

// BenchmarkCgroupPoolCycle is what the worker does with a pooled job
// cgroup around one job that left nothing running: get it (on the job's
// path), read its counters after the run, let it settle and put it back.
// It reports the CPU this process spent per cycle (cpu-us/op), and the
// wall time of get (get-us/op), the part on the job's path; ns/op is
// mostly settle's pause.
//
//	go test -run '^$' -bench CgroupPoolCycle -count 5 ./worker
func BenchmarkCgroupPoolCycle(b *testing.B) {
	m, err := cgroup.Detect(fmt.Sprintf("b%d-pool", os.Getpid()))
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("cgroups not usable here: %v", err)
		}
		b.Skipf("cgroups not usable here: %v", err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			b.Errorf("Close: %v", err)
		}
	}()
	p := &cgroupPool{m: m, max: 2, keepLimits: true}
	l := cgroup.Limits{MemoryBytes: 256 << 20, Pids: 64}
	var inGet time.Duration
	cycle := func() {
		start := time.Now()
		g, base, err := p.get(l)
		inGet += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		_ = (&jobLimits{group: g, base: base}).usage()
		settle(g)
		if err := p.put(g, l); err != nil {
			b.Fatal(err)
		}
	}
	cycle() // the group made once
	inGet = 0
	var before, after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &before)
	n := 0
	for b.Loop() {
		cycle()
		n++
	}
	_ = unix.Getrusage(unix.RUSAGE_SELF, &after)
	cpu := func(r unix.Rusage) float64 {
		return float64(r.Utime.Nano()+r.Stime.Nano()) / 1e3
	}
	b.ReportMetric((cpu(after)-cpu(before))/float64(n), "cpu-us/op")
	b.ReportMetric(float64(inGet.Nanoseconds())/1e3/float64(n), "get-us/op")
}
