package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/gpu"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
)

// GPUs: found once at Start (setupGPUs), advertised with the worker's
// presence (advertiseGPUs), leased one job per device (gpuLease). A job
// that holds devices runs in a sandbox made for it, whose /dev shows its
// own device nodes and the driver's control nodes, and nothing of the
// other devices; its variables name its devices (CUDA_VISIBLE_DEVICES).
// Its devices are free again once its cgroup is empty (jobLimits.release).

// gpuState is what a worker knows of its GPUs.
type gpuState struct {
	alloc   *gpu.Allocator
	control []gpu.Node
	smi     string

	// ready are, in a sandbox, each device's interpreters started ahead
	// of time in a sandbox that binds that device (by device name): a job
	// that holds one device does not wait for a sandbox to start while its
	// device idles.
	ready map[string]*runner.Fresh

	mu     sync.Mutex
	recent []time.Duration // how long the last GPU jobs held their devices
}

// recentGPUJobs is how many GPU jobs the advertised average is of.
const recentGPUJobs = 16

// note records how long a GPU job held its devices.
func (g *gpuState) note(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recent = append(g.recent, d)
	if len(g.recent) > recentGPUJobs {
		g.recent = g.recent[1:]
	}
}

// meanMS is the average of the recent GPU jobs, in milliseconds.
func (g *gpuState) meanMS() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.recent) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range g.recent {
		sum += d
	}
	return gpuMillis(sum / time.Duration(len(g.recent)))
}

// setupGPUs finds the worker's GPUs and keeps those the operator offers.
// A machine without any is not an error.
func (w *Worker) setupGPUs(ctx context.Context) error {
	inv, err := gpu.Discover(ctx, gpu.Config{Root: w.cfg.GPURoot, SMI: w.cfg.NvidiaSMI})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	devs, err := gpu.Select(inv.Devices, w.cfg.GPUs)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if len(devs) == 0 {
		return nil
	}
	for _, n := range inv.Notes {
		w.log.Warn("gpu discovery", "note", n)
	}
	for _, d := range devs {
		for _, n := range d.Nodes {
			if slices.Contains(w.cfg.SandboxDevices, n.Host) {
				w.log.Warn("a leased GPU's node is also bound into every sandbox (--sandbox-dev): every job sees it", "node", n.Host)
			}
		}
		w.log.Info("gpu offered", "index", d.Index, "name", d.Name(), "model", d.Model, "memory_mb", d.MemoryMB, "mig", d.MIG)
	}
	if w.box == nil {
		w.log.Warn("sandbox off: GPU jobs are told their devices (CUDA_VISIBLE_DEVICES) but can open every device node")
	}
	if w.cgroups == nil {
		w.log.Warn("no cgroups: GPU jobs run without a memory limit (CUDA fails under the per-process address-space limit that replaces it); give the worker a cgroup with the memory and pids controllers to bound them")
	}
	w.gpus = &gpuState{alloc: gpu.NewAllocator(devs), control: inv.Control, smi: inv.SMI}
	return w.gpus.sandboxes(w.sandboxCfg, w.log)
}

// sandboxes makes, in a sandbox, each device's Fresh: one-shot
// interpreters in sandboxes that bind that device's nodes and the
// control nodes.
func (g *gpuState) sandboxes(sb *runner.SandboxConfig, log *slog.Logger) error {
	if sb == nil {
		return nil
	}
	g.ready = map[string]*runner.Fresh{}
	for _, d := range g.alloc.All() {
		box, err := deviceBox(sb, gpu.NodesOf([]gpu.Device{d}, g.control))
		if err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		f := runner.NewFresh(box, log.With("part", "gpu-sandbox", "gpu", d.Name()))
		if err := f.Start(context.Background()); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		g.ready[d.Name()] = f
	}
	return nil
}

// deviceBox is sb with nodes bound.
func deviceBox(sb *runner.SandboxConfig, nodes []gpu.Node) (*runner.SandboxConfig, error) {
	var devs []sandbox.Device
	for _, n := range nodes {
		devs = append(devs, sandbox.Device{Src: n.Host, Dst: n.Sandbox})
	}
	box, err := sb.Box.WithDevices(devs)
	if err != nil {
		return nil, err
	}
	c := *sb
	c.Box = box
	return &c, nil
}

// prestartGPUs starts each device's first interpreter of the default
// environment, once the worker knows its interpreter: with the variables
// that name the device, as a job that holds it has them (they are part of
// what an interpreter started ahead of time is chosen by).
func (w *Worker) prestartGPUs() {
	if w.gpus == nil || w.gpus.ready == nil {
		return
	}
	for _, d := range w.gpus.alloc.All() {
		spec := w.spec("", "", "")
		addEnv(&spec, gpu.EnvOf([]gpu.Device{d}))
		w.gpus.ready[d.Name()].Prestart(spec)
	}
}

// addEnv sets vars in spec's environment, in a fixed order.
func addEnv(spec *runner.Spec, vars map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		spec.Env = append(spec.Env, k+"="+vars[k])
	}
}

// stopGPUs stops the interpreters started ahead of time.
func (w *Worker) stopGPUs() {
	if w.gpus == nil {
		return
	}
	for _, f := range w.gpus.ready {
		if err := f.Stop(context.Background()); err != nil {
			w.log.Warn("gpu sandboxes not stopped", "err", err)
		}
	}
}

// advertiseGPUs adds the devices, and how many jobs wait for them, to a
// presence record.
func (w *Worker) advertiseGPUs(a *envspec.Advert) {
	if w.gpus != nil {
		a.GPUs, a.GPUWaiting, a.GPUJobMS = w.gpus.alloc.Devices(), w.gpus.alloc.Waiting(), w.gpus.meanMS()
	}
}

// gpuJob is one job's hold on its devices.
type gpuJob struct {
	lease *gpu.Lease
	wait  time.Duration
	box   *runner.SandboxConfig // the job's own sandbox; nil without one
	ready *runner.Fresh         // or its device's interpreters started ahead of time
	peak  func() (int64, bool)
}

// gpuChanged receives a token when the worker's devices change hands:
// the heartbeat then advertises them at once, so that placement sees a
// busy device as busy. nil (never ready) without GPUs.
func (w *Worker) gpuChanged() <-chan struct{} {
	if w.gpus == nil {
		return nil
	}
	return w.gpus.alloc.Changed()
}

// gpuLease waits for the devices job asks for, until its deadline less its
// timeout (a job started later could not end before its caller stops
// waiting). A job that asks for none gets nil, nil; one this worker cannot
// serve, or that could not have its devices in time, a result saying so.
func (w *Worker) gpuLease(ctx context.Context, job *wire.Job, timeout time.Duration, attempt int, log *slog.Logger) (*gpuJob, *wire.Result) {
	if job.GPU == nil {
		return nil, nil
	}
	if w.gpus == nil {
		return nil, w.result(job, attempt, wire.StatusRejected, fmt.Sprintf("this worker has no GPUs; the job asks for %s", job.GPU))
	}
	if !job.Deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, job.Deadline.Add(-timeout))
		defer cancel()
	}
	t0 := time.Now()
	lease, err := w.gpus.alloc.Acquire(ctx, job.ID, job.EnqueuedAt, *job.GPU)
	switch {
	case errors.Is(err, gpu.ErrNeverFits):
		return nil, w.result(job, attempt, wire.StatusRejected, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return nil, w.result(job, attempt, wire.StatusExpired, fmt.Sprintf("waited %s for %s, which stayed busy: started any later, the job could not end before its deadline; nothing ran",
			time.Since(t0).Round(time.Millisecond), job.GPU))
	case err != nil:
		return nil, w.result(job, attempt, wire.StatusInternal, "waiting for a GPU: "+err.Error())
	}
	gj := &gpuJob{lease: lease, wait: time.Since(t0)}
	log.Info("gpu leased", "devices", lease.Env()["CUDA_VISIBLE_DEVICES"], "wait_ms", gpuMillis(gj.wait))
	return gj, nil
}

// gpuMillis is d in milliseconds, for logs and results.
func gpuMillis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// confineGPUs shows the job its devices: their variables in its
// environment and, in a sandbox, a sandbox of its own binding their nodes.
// The lease is released after the job's limits are (its cgroup emptied).
func (w *Worker) confineGPUs(gj *gpuJob, spec *runner.Spec, jl *jobLimits) error {
	if gj == nil {
		return nil
	}
	jl.after = gj.lease.Release
	addEnv(spec, gj.lease.Env())
	if w.sandboxCfg == nil {
		return nil
	}
	if len(gj.lease.Devices) == 1 {
		gj.ready = w.gpus.ready[gj.lease.Devices[0].Name()]
		return nil
	}
	box, err := deviceBox(w.sandboxCfg, gj.lease.Nodes(w.gpus.control))
	gj.box = box
	return err
}

// runJob runs spec: with the worker's executor, or, for a job that holds
// GPUs in a sandbox, in a sandbox of its own that binds its devices.
func (w *Worker) runJob(ctx context.Context, spec runner.Spec, gj *gpuJob) (runner.Outcome, error) {
	if gj == nil {
		return w.exec.Run(ctx, spec)
	}
	var uuids []string
	for _, d := range gj.lease.Devices {
		uuids = append(uuids, d.UUID)
	}
	gj.peak = gpu.WatchPeak(w.gpus.smi, uuids, gpu.PeakInterval)
	t0 := time.Now()
	defer func() { w.gpus.note(time.Since(t0)) }()
	switch {
	case gj.ready != nil:
		return gj.ready.Run(ctx, spec)
	case gj.box != nil:
		return runner.RunSandboxed(ctx, gj.box, spec)
	}
	return w.exec.Run(ctx, spec)
}

// release gives the devices back at once: for a job that ends before its
// limits are made (confineGPUs hands the release to them).
func (gj *gpuJob) release() {
	if gj != nil {
		gj.lease.Release()
	}
}

// usage is what the result says of the job's devices.
func (gj *gpuJob) usage() *wire.GPUUsage {
	if gj == nil {
		return nil
	}
	u := &wire.GPUUsage{Devices: gj.lease.GPUs(), WaitMS: gpuMillis(gj.wait)}
	if gj.peak != nil {
		u.PeakMemoryMB, u.PeakReported = gj.peak()
	}
	return u
}
