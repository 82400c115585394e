package frontend

import (
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
)

func TestGPUArg(t *testing.T) {
	r, err := gpuArg(map[string]any{"gpu": map[string]any{"min_memory_mb": float64(40000), "model": "H100", "label": "zone=eu"}})
	if err != nil || *r != (envspec.GPURequest{Count: 1, MinMemoryMB: 40000, Model: "H100", Label: "zone=eu"}) {
		t.Fatalf("%+v, %v", r, err)
	}
	if r, err := gpuArg(map[string]any{"gpu": nil}); r != nil || err != nil {
		t.Fatalf("null: %+v, %v", r, err)
	}
	for name, v := range map[string]any{
		"not an object": "1",
		"zero":          map[string]any{"count": float64(0)},
		"fraction":      map[string]any{"count": 1.5},
		"huge":          map[string]any{"count": 1e18},
		"string count":  map[string]any{"count": "2"},
		"negative mem":  map[string]any{"min_memory_mb": float64(-1)},
		"unknown key":   map[string]any{"vram": float64(1)},
		"control chars": map[string]any{"model": "H100\n"},
		"model type":    map[string]any{"model": float64(100)},
	} {
		if r, err := gpuArg(map[string]any{"gpu": v}); err == nil {
			t.Errorf("%s: accepted as %+v", name, r)
		} else if te := asToolError(err); te.Status != wire.StatusRejected {
			t.Errorf("%s: status %s", name, te.Status)
		}
	}
}

func TestGPUResultSaysWhatTheDriverDidNotReport(t *testing.T) {
	u := &wire.GPUUsage{Devices: []envspec.GPU{{Index: 2, UUID: "GPU-x", Model: "NVIDIA L4"}}, WaitMS: 1500}
	line := gpuLine(u)
	for _, want := range []string{"2: GPU-x (NVIDIA L4)", "peak memory not reported", "waited 1500 ms"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	u.PeakReported, u.PeakMemoryMB = true, 0
	if g := gpuResult(u); g.PeakMemory != "0 MiB" {
		t.Errorf("reported zero: %q", g.PeakMemory)
	}
	if gpuResult(nil) != nil || gpuLine(nil) != "" {
		t.Error("a job without GPUs has GPU output")
	}
}

// Calls placed on the same presence records count this frontend's jobs
// as busy devices: the third call to a pool of two free devices is
// queued, not sent to a device the records still show free.
func TestGPUInflightCountsOwnJobs(t *testing.T) {
	adverts := []envspec.Advert{
		{WorkerID: "a", Targeted: true, GPUs: []envspec.GPU{{Index: 0, Model: "L4"}}},
		{WorkerID: "b", Targeted: true, GPUs: []envspec.GPU{{Index: 0, Model: "L4"}}},
	}
	var g gpuInflight
	r := envspec.GPURequest{Count: 1}
	seen := map[string]bool{}
	for i := range 3 {
		p, err := envspec.ChooseGPU(g.busy(adverts, r), r)
		if err != nil {
			t.Fatal(err)
		}
		if i < 2 && (p.Queued || seen[p.WorkerID]) {
			t.Fatalf("call %d: %+v; want a free worker not used yet", i, p)
		}
		if i == 2 && !p.Queued {
			t.Fatalf("third call: %+v; want queued", p)
		}
		seen[p.WorkerID] = true
		job := &wire.Job{ID: string(rune('x' + i)), GPU: &r, Deadline: time.Now().Add(time.Minute)}
		g.add(job, p.WorkerID)
	}
	if adverts[0].GPUs[0].Busy || adverts[1].GPUs[0].Busy {
		t.Error("the presence records were changed")
	}
	g.done("x")
	g.done("x")
	g.done("z") // the queued one, on the same worker as x
	if p, _ := envspec.ChooseGPU(g.busy(adverts, r), r); p.Queued {
		t.Errorf("after a result: %+v; want a free device", p)
	}
}
