package envspec

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNoGPU is wrapped by ChooseGPU's error when no live worker could ever
// serve a GPU request; the message says what the workers have.
var ErrNoGPU = errors.New("no live worker has the GPUs asked for")

// GPU is one device a worker offers: a whole GPU, or a MIG instance of
// one. Workers find theirs at start-up (worker/gpu) and advertise them in
// Advert.GPUs.
type GPU struct {
	// Index is the driver's index of the GPU (of its parent for a MIG
	// instance).
	Index int `json:"index"`
	// UUID is the driver's id ("GPU-…", "MIG-…"); empty on a device
	// whose driver did not say.
	UUID string `json:"uuid,omitempty"`
	// Model is the product name ("NVIDIA H100 80GB HBM3").
	Model string `json:"model,omitempty"`
	// MemoryMB is the device's memory in MiB; 0 when unknown.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// BusID is the PCI address ("0000:18:00.0").
	BusID string `json:"bus_id,omitempty"`
	// MIG is the instance's profile ("1g.10gb"); empty for a whole GPU.
	MIG string `json:"mig,omitempty"`
	// Busy says a job held the device at the worker's last heartbeat.
	Busy bool `json:"busy,omitempty"`
}

// Name is how a device is named to callers and in CUDA_VISIBLE_DEVICES:
// its UUID, else "gpu<index>".
func (g GPU) Name() string {
	if g.UUID != "" {
		return g.UUID
	}
	return fmt.Sprintf("gpu%d", g.Index)
}

// GPURequest is what a call asks for: Count devices, each with at least
// MinMemoryMB of memory and, when set, a model whose name contains Model
// (case-insensitive), on a worker whose labels include Label ("KEY" or
// "KEY=VALUE").
type GPURequest struct {
	Count       int    `json:"count"`
	MinMemoryMB int64  `json:"min_memory_mb,omitempty"`
	Model       string `json:"model,omitempty"`
	Label       string `json:"label,omitempty"`
}

// MaxGPUCount bounds GPURequest.Count.
const MaxGPUCount = 64

// Validate checks r: a count between 1 and MaxGPUCount, no negative
// memory, printable short strings.
func (r GPURequest) Validate() error {
	switch {
	case r.Count < 1 || r.Count > MaxGPUCount:
		return fmt.Errorf("gpu.count must be between 1 and %d, not %d", MaxGPUCount, r.Count)
	case r.MinMemoryMB < 0:
		return fmt.Errorf("gpu.min_memory_mb must not be negative")
	case !shortText(r.Model) || !shortText(r.Label):
		return fmt.Errorf("gpu.model and gpu.label are at most 128 printable characters")
	}
	return nil
}

func shortText(s string) bool {
	return len(s) <= 128 && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
}

// String says r in words, for messages: "2 GPUs with ≥ 40000 MiB, model H100".
func (r GPURequest) String() string {
	s := fmt.Sprintf("%d GPU", r.Count)
	if r.Count != 1 {
		s += "s"
	}
	if r.MinMemoryMB > 0 {
		s += fmt.Sprintf(" with at least %d MiB", r.MinMemoryMB)
	}
	if r.Model != "" {
		s += fmt.Sprintf(", model %q", r.Model)
	}
	if r.Label != "" {
		s += fmt.Sprintf(", label %q", r.Label)
	}
	return s
}

// Fits reports whether device g can serve one of r's devices.
func (r GPURequest) Fits(g GPU) bool {
	return g.MemoryMB >= r.MinMemoryMB &&
		(r.Model == "" || strings.Contains(strings.ToLower(g.Model), strings.ToLower(r.Model)))
}

// LabelOK reports whether labels satisfy r's Label.
func (r GPURequest) LabelOK(labels map[string]string) bool {
	if r.Label == "" {
		return true
	}
	k, v, withValue := strings.Cut(r.Label, "=")
	have, ok := labels[k]
	return ok && (!withValue || have == v)
}

// GPUPlacement is where ChooseGPU sends a request.
type GPUPlacement struct {
	WorkerID string
	// Free counts the worker's matching devices free at its last
	// heartbeat; Queued says fewer than the request's count were, so the
	// job waits on that worker for devices.
	Free   int
	Queued bool
	// Ahead is the number of GPU jobs that were waiting on the worker at
	// its last heartbeat; Matching its devices that fit the request.
	Ahead, Matching int
}

// ChooseGPU picks the worker a job asking for r goes to, among adverts:
// one with r.Count matching devices free and nobody waiting (the most
// free, then the least loaded, then the lowest id: jobs spread over the
// workers, so that two calls placed on the same stale records seldom
// meet on one worker); else the able worker whose queue is shortest per
// matching device. Only workers that consume their own
// subject (Targeted) qualify. A request no live worker could ever serve
// (too few matching devices anywhere) is an error wrapping ErrNoGPU that
// says what the workers have.
func ChooseGPU(adverts []Advert, r GPURequest) (GPUPlacement, error) {
	var able []GPUPlacement
	for _, a := range adverts {
		if !a.Targeted || !r.LabelOK(a.Capabilities.Labels) {
			continue
		}
		p := GPUPlacement{WorkerID: a.WorkerID, Ahead: a.GPUWaiting}
		for _, g := range a.GPUs {
			if r.Fits(g) {
				p.Matching++
				if !g.Busy {
					p.Free++
				}
			}
		}
		if p.Matching >= r.Count {
			able = append(able, p)
		}
	}
	if len(able) == 0 {
		return GPUPlacement{}, fmt.Errorf("%w: nobody could ever run a job asking for %s; live workers have: %s",
			ErrNoGPU, r, describeGPUs(adverts))
	}
	load := map[string]int{}
	for _, a := range adverts {
		load[a.WorkerID] = a.Load
	}
	free := filter2(able, func(p GPUPlacement) bool { return p.Free >= r.Count && p.Ahead == 0 })
	if len(free) > 0 {
		return slices.MinFunc(free, func(a, b GPUPlacement) int {
			return cmp.Or(cmp.Compare(b.Free, a.Free), cmp.Compare(load[a.WorkerID], load[b.WorkerID]), cmp.Compare(a.WorkerID, b.WorkerID))
		}), nil
	}
	p := slices.MinFunc(able, func(a, b GPUPlacement) int {
		// Queue length per matching device, compared without division.
		return cmp.Or(cmp.Compare((a.Ahead+r.Count)*b.Matching, (b.Ahead+r.Count)*a.Matching), cmp.Compare(a.WorkerID, b.WorkerID))
	})
	p.Queued = true
	return p, nil
}

func filter2(ps []GPUPlacement, keep func(GPUPlacement) bool) []GPUPlacement {
	var out []GPUPlacement
	for _, p := range ps {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// describeGPUs lists each worker's devices for an error message.
func describeGPUs(adverts []Advert) string {
	return describe(adverts, func(a Advert) []string {
		var out []string
		for _, g := range a.GPUs {
			d := fmt.Sprintf("%s %d MiB", cmp.Or(g.Model, "unknown model"), g.MemoryMB)
			if g.MIG != "" {
				d += " MIG " + g.MIG
			}
			out = append(out, d)
		}
		if len(out) > 0 && !a.Targeted {
			out = append(out, "(not reachable alone)")
		}
		return out
	})
}
