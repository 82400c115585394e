package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/codexec/codexec/envspec"
)

// ErrNeverFits is wrapped by Acquire's error when the worker does not
// have the devices asked for, busy or not: waiting would not help.
var ErrNeverFits = errors.New("gpu: this worker does not have the devices asked for")

// Allocator leases a worker's devices to jobs, one job per device. Jobs
// that cannot have their devices at once wait in the order they were
// queued (their callers' order, not the order in which this worker got
// round to them): a waiting job is served before any queued after it,
// even one that would fit now, so that a job asking for several devices
// is not passed over for ever by jobs asking for one.
type Allocator struct {
	devs []Device

	mu      sync.Mutex
	holder  []string // job id holding each device, "" when free
	waiting []*waiter
	changed chan struct{} // a token when a device is leased or freed, or a job waits
}

type waiter struct {
	job   string
	at    time.Time // when the job was queued
	req   envspec.GPURequest
	ready chan []int // the device indices (into devs) granted
}

// NewAllocator leases devs.
func NewAllocator(devs []Device) *Allocator {
	return &Allocator{devs: devs, holder: make([]string, len(devs)), changed: make(chan struct{}, 1)}
}

// Changed receives a token after a device is leased or freed or a job
// starts waiting (several changes may make one token): the time to
// advertise the devices again.
func (a *Allocator) Changed() <-chan struct{} { return a.changed }

func (a *Allocator) noteLocked() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// Devices are the devices leased, each with Busy as of now.
func (a *Allocator) Devices() []envspec.GPU {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]envspec.GPU, len(a.devs))
	for i, d := range a.devs {
		out[i] = d.GPU
		out[i].Busy = a.holder[i] != ""
	}
	return out
}

// Waiting counts the jobs waiting for devices.
func (a *Allocator) Waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.waiting)
}

// Lease is the devices one job holds until Release.
type Lease struct {
	a       *Allocator
	idx     []int
	once    sync.Once
	Devices []Device
}

// Acquire leases req.Count devices that fit req to job, queued at at,
// waiting (behind the jobs queued before it) until they are free or ctx
// ends. A request this worker could never serve fails at once, wrapping
// ErrNeverFits.
func (a *Allocator) Acquire(ctx context.Context, job string, at time.Time, req envspec.GPURequest) (*Lease, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	a.mu.Lock()
	matching := 0
	for _, d := range a.devs {
		if req.Fits(d.GPU) {
			matching++
		}
	}
	if matching < req.Count {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: %s asked, %d of its %d devices fit", ErrNeverFits, req, matching, len(a.devs))
	}
	w := &waiter{job: job, at: at, req: req, ready: make(chan []int, 1)}
	i := len(a.waiting)
	for i > 0 && a.waiting[i-1].at.After(at) {
		i--
	}
	a.waiting = slices.Insert(a.waiting, i, w)
	a.noteLocked()
	a.grantLocked()
	a.mu.Unlock()
	select {
	case idx := <-w.ready:
		return a.lease(idx), nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		select {
		case idx := <-w.ready: // granted meanwhile: give it back
			a.freeLocked(idx)
		default:
			a.removeLocked(w)
		}
		a.grantLocked()
		return nil, ctx.Err()
	}
}

func (a *Allocator) lease(idx []int) *Lease {
	l := &Lease{a: a, idx: idx}
	for _, i := range idx {
		l.Devices = append(l.Devices, a.devs[i])
	}
	return l
}

// Release gives the lease's devices back; later calls do nothing. The
// caller releases only once the job and everything it started are gone.
func (l *Lease) Release() {
	l.once.Do(func() {
		l.a.mu.Lock()
		defer l.a.mu.Unlock()
		l.a.freeLocked(l.idx)
		l.a.grantLocked()
	})
}

// grantLocked serves the waiting jobs in order while the first one's
// devices are free.
func (a *Allocator) grantLocked() {
	for len(a.waiting) > 0 {
		w := a.waiting[0]
		var idx []int
		for i, d := range a.devs {
			if len(idx) < w.req.Count && a.holder[i] == "" && w.req.Fits(d.GPU) {
				idx = append(idx, i)
			}
		}
		if len(idx) < w.req.Count {
			return
		}
		for _, i := range idx {
			a.holder[i] = w.job
		}
		a.waiting = a.waiting[1:]
		a.noteLocked()
		w.ready <- idx
	}
}

func (a *Allocator) freeLocked(idx []int) {
	for _, i := range idx {
		a.holder[i] = ""
	}
	a.noteLocked()
}

func (a *Allocator) removeLocked(w *waiter) {
	for i, x := range a.waiting {
		if x == w {
			a.waiting = append(a.waiting[:i], a.waiting[i+1:]...)
			return
		}
	}
}

// All are the devices a leases.
func (a *Allocator) All() []Device { return a.devs }

// Nodes are the device nodes a job holding l must see: its devices' own
// and the driver's control nodes, each once.
func (l *Lease) Nodes(control []Node) []Node { return NodesOf(l.Devices, control) }

// NodesOf are the device nodes a job holding devs must see: their own and
// the driver's control nodes, each once.
func NodesOf(devs []Device, control []Node) []Node {
	seen := map[string]bool{}
	var out []Node
	for _, d := range devs {
		for _, n := range d.Nodes {
			if !seen[n.Sandbox] {
				seen[n.Sandbox] = true
				out = append(out, n)
			}
		}
	}
	for _, n := range control {
		if !seen[n.Sandbox] {
			seen[n.Sandbox] = true
			out = append(out, n)
		}
	}
	return out
}

// Env are the variables that show a job its devices: CUDA_VISIBLE_DEVICES
// and NVIDIA_VISIBLE_DEVICES name them (by UUID where the driver gave
// one, so that the order CUDA enumerates in does not matter).
func (l *Lease) Env() map[string]string { return EnvOf(l.Devices) }

// EnvOf are the variables that show a job devs (see Lease.Env).
func EnvOf(devs []Device) map[string]string {
	var names string
	for i, d := range devs {
		if i > 0 {
			names += ","
		}
		names += d.Name()
	}
	return map[string]string{"CUDA_VISIBLE_DEVICES": names, "NVIDIA_VISIBLE_DEVICES": names}
}

// GPUs describes the leased devices for a result.
func (l *Lease) GPUs() []envspec.GPU {
	out := make([]envspec.GPU, len(l.Devices))
	for i, d := range l.Devices {
		out[i] = d.GPU
		out[i].Busy = false
	}
	return out
}
