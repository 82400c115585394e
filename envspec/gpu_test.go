package envspec

import (
	"errors"
	"strings"
	"testing"
)

func gpus(model string, memMB int64, busy ...bool) []GPU {
	out := make([]GPU, len(busy))
	for i, b := range busy {
		out[i] = GPU{Index: i, Model: model, MemoryMB: memMB, Busy: b}
	}
	return out
}

func TestChooseGPU(t *testing.T) {
	adverts := []Advert{
		{WorkerID: "a", Targeted: true, GPUs: gpus("NVIDIA H100 80GB HBM3", 81559, true, false)},
		{WorkerID: "b", Targeted: true, GPUs: gpus("NVIDIA L4", 23034, false, false, false), Capabilities: Capabilities{Labels: map[string]string{"zone": "eu"}}},
		{WorkerID: "c", GPUs: gpus("NVIDIA H100 80GB HBM3", 81559, false, false)}, // not targeted
		{WorkerID: "d", Targeted: true},
	}
	for _, c := range []struct {
		req    GPURequest
		worker string
		queued bool
	}{
		{GPURequest{Count: 1}, "b", false},                     // most free: b has 3, a 1
		{GPURequest{Count: 2}, "b", false},                     // a has one free
		{GPURequest{Count: 1, MinMemoryMB: 40000}, "a", false}, // the H100 only
		{GPURequest{Count: 2, Model: "h100"}, "a", true},       // a's two, one busy: queued
		{GPURequest{Count: 1, Label: "zone=eu"}, "b", false},   // label with value
		{GPURequest{Count: 3, Label: "zone"}, "b", false},      // label key
		{GPURequest{Count: 1, Model: "L4", Label: "x"}, "", false},
		{GPURequest{Count: 4}, "", false},
	} {
		p, err := ChooseGPU(adverts, c.req)
		if c.worker == "" {
			if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), "NVIDIA L4") {
				t.Errorf("%s: %+v, %v; want ErrNoGPU saying what workers have", c.req, p, err)
			}
			continue
		}
		if err != nil || p.WorkerID != c.worker || p.Queued != c.queued {
			t.Errorf("%s: %+v, %v; want %s queued=%v", c.req, p, err, c.worker, c.queued)
		}
	}
}

func TestChooseGPUQueuesOnTheShortestQueue(t *testing.T) {
	adverts := []Advert{
		{WorkerID: "a", Targeted: true, GPUs: gpus("L4", 1, true, true), GPUWaiting: 3},
		{WorkerID: "b", Targeted: true, GPUs: gpus("L4", 1, true, true, true, true), GPUWaiting: 4},
	}
	p, err := ChooseGPU(adverts, GPURequest{Count: 1})
	if err != nil || p.WorkerID != "b" || !p.Queued || p.Ahead != 4 {
		t.Fatalf("%+v, %v: want b (5 per 4 devices beats 4 per 2), queued, 4 ahead", p, err)
	}
}

func TestGPURequestValidate(t *testing.T) {
	for _, r := range []GPURequest{{Count: 0}, {Count: MaxGPUCount + 1}, {Count: 1, MinMemoryMB: -1}, {Count: 1, Model: "a\nb"}, {Count: 1, Label: strings.Repeat("x", 129)}} {
		if r.Validate() == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if err := (GPURequest{Count: 2, MinMemoryMB: 1, Model: "H100", Label: "k=v"}).Validate(); err != nil {
		t.Error(err)
	}
}
