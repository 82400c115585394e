package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/worker/gpu/gputest"
)

// BenchmarkGPUFigures measures the GPU figures of docs/gpu.md, on fake
// devices (no GPU is needed, none is used):
//
//	go test ./cmd/codexec -run '^$' -bench 'GPUFigures/overhead' -benchtime 100x
//	go test ./cmd/codexec -run '^$' -bench 'GPUFigures/queue' -benchtime 1x
//
// A benchmark rather than a test: its figures are timings. The queue also
// checks what is not a timing: every job ran, each on one device, and no
// two at once on one device.
func BenchmarkGPUFigures(b *testing.B) {
	// One op: a print(1) call without a GPU and one asking for a GPU,
	// alternating, on one worker with two fake devices.
	b.Run("overhead", func(b *testing.B) {
		cl := fakeGPUCluster(b, 2, 4)
		c := httpClient(b, cl.mcpURL)
		cpu := map[string]any{"code": "print(1)"}
		gpuCall := map[string]any{"code": "print(1)", "gpu": map[string]any{"count": 1}}
		for _, args := range []map[string]any{cpu, gpuCall} {
			if res, er := call(b, c, "execute_code", args); res.IsError {
				b.Fatal(er.Message)
			}
		}
		var dc, dg []time.Duration
		b.ResetTimer()
		for range b.N {
			for _, args := range []map[string]any{cpu, gpuCall} {
				start := time.Now()
				if res, er := call(b, c, "execute_code", args); res.IsError {
					b.Fatal(er.Message)
				}
				if args["gpu"] == nil {
					dc = append(dc, time.Since(start))
				} else {
					dg = append(dg, time.Since(start))
				}
			}
		}
		b.ReportMetric(e2e.Percentile(dc, 50), "cpu-p50-ms")
		b.ReportMetric(e2e.Percentile(dg, 50), "gpu-p50-ms")
	})

	// One op: 4N calls of 0.2 s each, asking for one GPU, sent one after
	// the other (without waiting) to a worker with N fake devices.
	for _, n := range []int{2, 4} {
		b.Run(fmt.Sprintf("queue/devices=%d", n), func(b *testing.B) {
			cl := fakeGPUCluster(b, n, 4*n)
			c := httpClient(b, cl.mcpURL)
			for range b.N {
				runs := make([]gpuRun, 4*n)
				var wg sync.WaitGroup
				t0 := time.Now()
				for i := range runs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						res, er := call(b, c, "execute_code", map[string]any{"code": gpuSleep, "gpu": map[string]any{"count": 1}})
						if res.IsError || er.GPU == nil {
							b.Errorf("job %d: %+v", i, er)
							return
						}
						if err := json.Unmarshal([]byte(er.Stdout), &runs[i]); err != nil {
							b.Errorf("job %d: %v", i, err)
						}
						runs[i].Device, runs[i].Index = er.GPU.Devices[0], i
					}()
					time.Sleep(10 * time.Millisecond) // sent in order i
				}
				wg.Wait()
				wall := time.Since(t0)
				util, order, gap := gpuQueueFigures(b, runs, n)
				b.ReportMetric(util*100, "util-%")
				b.ReportMetric(gap, "handoff-p50-ms")
				b.ReportMetric(wall.Seconds(), "wall-s")
				b.ReportMetric(float64(4*n)*0.2/float64(n), "ideal-s")
				b.Logf("devices=%d jobs=%d: busy %.0f%% of device time while jobs waited, handoff p50 %.0f ms; start order by send order: %v", n, 4*n, util*100, gap, order)
			}
		})
	}
}

// gpuSleep holds its device 0.2 s and says when (the host's clock).
const gpuSleep = "import json, time\nstart = time.time()\ntime.sleep(0.2)\nprint(json.dumps({'start': start, 'end': time.time()}))\n"

type gpuRun struct {
	Start, End float64
	Device     string
	Index      int
}

// gpuQueueFigures checks that no two runs overlapped on a device and
// returns the share of device time busy from the first start to the last
// start (while jobs waited), the send indices in the order the jobs
// started, and the median time in milliseconds from a job's end to the
// next job's start on its device (the handoff).
func gpuQueueFigures(b *testing.B, runs []gpuRun, devices int) (float64, []int, float64) {
	byStart := slices.Clone(runs)
	slices.SortFunc(byStart, func(x, y gpuRun) int {
		if x.Start < y.Start {
			return -1
		}
		return 1
	})
	first, lastStart := byStart[0].Start, byStart[len(byStart)-1].Start
	busy := 0.0
	used := map[string]bool{}
	last := map[string]float64{}
	var gaps []time.Duration
	var order []int
	for i, r := range byStart {
		used[r.Device] = true
		if end, ok := last[r.Device]; ok {
			gaps = append(gaps, time.Duration((r.Start-end)*float64(time.Second)))
		}
		last[r.Device] = r.End
		order = append(order, r.Index)
		busy += max(0, min(r.End, lastStart)-max(r.Start, first))
		for _, o := range byStart[i+1:] {
			if o.Device == r.Device && o.Start < r.End {
				b.Errorf("two jobs on %s at once: %+v, %+v", r.Device, r, o)
			}
		}
	}
	if len(used) != devices {
		b.Errorf("jobs ran on %d devices of %d", len(used), devices)
	}
	return busy / (float64(devices) * (lastStart - first)), order, e2e.Percentile(gaps, 50)
}

// fakeGPUCluster is a cluster of one worker with n fake H100s running up
// to concurrency jobs.
func fakeGPUCluster(b *testing.B, n, concurrency int) *cluster {
	b.Helper()
	gpus := make([]gputest.GPU, n)
	for i := range gpus {
		gpus[i] = gputest.GPU{Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}
	}
	tree, err := gputest.Write(b.TempDir(), gpus, os.Geteuid() == 0)
	if err != nil {
		b.Fatal(err)
	}
	return startClusterArgs(b, [][]string{{"--gpu-root", tree.Root, "--nvidia-smi", tree.SMI, "--concurrency", fmt.Sprint(concurrency)}})
}
