package limits

import (
	"testing"
	"time"

	"github.com/codexec/codexec/worker/runner"
	"golang.org/x/sys/unix"
)

func TestRlimits(t *testing.T) {
	t.Parallel()
	find := func(rl []runner.Rlimit, res int) (runner.Rlimit, bool) {
		for _, r := range rl {
			if r.Resource == res {
				return r, true
			}
		}
		return runner.Rlimit{}, false
	}
	s := Set{Memory: 1 << 30, CPU: 1500 * time.Millisecond, Procs: 64, FileSize: 1 << 20, Disk: 1 << 30, OpenFiles: 100}
	rl := s.Rlimits(false)
	want := map[int][2]uint64{
		unix.RLIMIT_CORE:    {1, 1}, // 1: no core_pattern pipe program either (runner.NoCoreFiles)
		unix.RLIMIT_RTPRIO:  {0, 0},
		unix.RLIMIT_NICE:    {0, 0},
		unix.RLIMIT_MEMLOCK: {0, 0},
		unix.RLIMIT_CPU:     {2, 3},
		unix.RLIMIT_NPROC:   {64, 64},
		unix.RLIMIT_FSIZE:   {1 << 20, 1 << 20},
		unix.RLIMIT_NOFILE:  {100, 100},
		unix.RLIMIT_AS:      {1 << 30, 1 << 30},
	}
	if len(rl) != len(want) {
		t.Fatalf("Rlimits = %+v, want %d entries", rl, len(want))
	}
	for res, w := range want {
		r, ok := find(rl, res)
		if !ok || r.Cur != w[0] || r.Max != w[1] {
			t.Errorf("resource %d: %+v (found %v), want cur %d max %d", res, r, ok, w[0], w[1])
		}
	}
	if _, ok := find(s.Rlimits(true), unix.RLIMIT_AS); ok {
		t.Error("RLIMIT_AS set although a cgroup limits memory")
	}
	if rl := (Set{CPU: 60 * time.Second}).Rlimits(false); len(rl) != 5 || rl[4].Cur != 60 || rl[4].Max != 61 {
		t.Errorf("cpu 60s: %+v", rl)
	}
	// A job never gets real-time scheduling or a raised priority, whatever
	// the worker was started with: a busy loop under SCHED_FIFO would take
	// the host's CPUs from everything not real-time, past any cgroup.
	// Nor locks pages in memory (RLIMIT_MEMLOCK 0): see Rlimits.
	if rl := (Set{}).Rlimits(false); len(rl) != 4 {
		t.Errorf("no limits: %+v, want RLIMIT_CORE 1, RLIMIT_RTPRIO, RLIMIT_NICE and RLIMIT_MEMLOCK 0 only", rl)
	}
	for res, v := range map[int]uint64{unix.RLIMIT_CORE: 1, unix.RLIMIT_RTPRIO: 0, unix.RLIMIT_NICE: 0, unix.RLIMIT_MEMLOCK: 0} {
		if r, ok := find((Set{}).Rlimits(false), res); !ok || r.Cur != v || r.Max != v {
			t.Errorf("no limits: resource %d %+v (found %v), want %d", res, r, ok, v)
		}
	}
}
