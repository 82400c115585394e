package frontend

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// GPU requests: a call asks for GPUs with its gpu argument (gpuArg); the
// job goes to the worker envspec.ChooseGPU picks (placeGPU), on its own
// subject, where it waits for its devices if they are busy; a request no
// live worker could serve is refused before anything is queued.

// gpuOption is the gpu parameter of the tools that run code.
func gpuOption() mcp.ToolOption {
	return mcp.WithObject("gpu",
		mcp.Description("GPUs for this call: the code runs on a worker that has them, holding them alone (one job per device), "+
			"and sees only them (CUDA_VISIBLE_DEVICES names them). Waits when they are busy; refused at once when no worker has them. "+
			`E.g. {"count": 1, "min_memory_mb": 40000, "model": "H100"}.`),
		mcp.Properties(map[string]any{
			"count":         map[string]any{"type": "integer", "minimum": 1, "maximum": envspec.MaxGPUCount, "description": "devices (default 1)"},
			"min_memory_mb": map[string]any{"type": "integer", "minimum": 0, "description": "least memory of each device, in MiB"},
			"model":         map[string]any{"type": "string", "description": "part of the model name, e.g. H100 (case-insensitive)"},
			"label":         map[string]any{"type": "string", "description": "a label of the worker, KEY or KEY=VALUE, as its operator set it"},
		}),
		mcp.AdditionalProperties(false),
	)
}

// gpuArg reads the optional gpu argument from untrusted input. Absent or
// null is nil (no GPU).
func gpuArg(args map[string]any) (*envspec.GPURequest, error) {
	v, present := args["gpu"]
	if !present || v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, rejected(`argument 'gpu' must be an object, e.g. {"count": 1, "min_memory_mb": 16000}`)
	}
	r := envspec.GPURequest{Count: 1}
	for key, val := range obj {
		switch key {
		case "count", "min_memory_mb":
			n, ok := wholeNumber(val)
			if !ok {
				return nil, rejected("gpu.%s must be a whole number, not %s", key, describeValue(val))
			}
			if key == "count" {
				r.Count = int(min(n, math.MaxInt32))
			} else {
				r.MinMemoryMB = n
			}
		case "model", "label":
			s, ok := val.(string)
			if !ok {
				return nil, rejected("gpu.%s must be a string", key)
			}
			if key == "model" {
				r.Model = s
			} else {
				r.Label = s
			}
		default:
			return nil, rejected("unknown key %q in 'gpu' (valid keys: count, min_memory_mb, model, label)", key)
		}
	}
	if err := r.Validate(); err != nil {
		return nil, rejected("%v", err)
	}
	return &r, nil
}

// wholeNumber reads a JSON number that is a whole number within int64.
func wholeNumber(v any) (int64, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, false
	}
	return int64(f), true
}

// placeGPU chooses the worker for a job that asks for GPUs. Only live
// presence places one (a worker's own subject is the only way to it); a
// request no live worker could serve is refused with what they have. When
// its devices are busy, wait says where the job waits (announceGPUWait
// tells the caller once the job is queued).
func (f *Frontend) placeGPU(ctx context.Context, job *wire.Job, adverts []envspec.Advert, live bool) (target, wait string, err error) {
	if !live {
		return "", "", failure(wire.StatusInternal, "cannot place a job that asks for %s: the workers' presence cannot be read now; try again shortly", job.GPU)
	}
	p, err := envspec.ChooseGPU(f.gpuJobs.busy(adverts, *job.GPU), *job.GPU)
	if errors.Is(err, envspec.ErrNoGPU) {
		return "", "", failure(wire.StatusRejected, "%v (pool %q); nothing was run", err, f.cfg.Pool)
	}
	if err != nil {
		return "", "", failure(wire.StatusInternal, "%v", err)
	}
	if p.Queued {
		wait = gpuWaitMessage(job, p, adverts)
		f.log.Info("gpu job queued", "job", job.ID, "worker", p.WorkerID, "ahead", p.Ahead)
	}
	f.gpuJobs.add(job, p.WorkerID)
	return p.WorkerID, wait, nil
}

// gpuInflight counts the GPU jobs this frontend sent to each worker and
// has no result of yet. A worker's presence says which devices are busy
// as of its last record, so calls placed in the same instant would all
// see the same free device; placement counts this frontend's own jobs as
// busy devices on top (busy). An entry goes when its call has its result
// (done), or at its deadline plus grace whatever happens.
type gpuInflight struct {
	mu   sync.Mutex
	jobs map[string]gpuSent
}

type gpuSent struct {
	worker string
	count  int
	timer  *time.Timer
}

func (g *gpuInflight) add(job *wire.Job, worker string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.jobs == nil {
		g.jobs = map[string]gpuSent{}
	}
	id := job.ID
	t := time.AfterFunc(time.Until(job.Deadline.Add(resultGrace)), func() { g.done(id) })
	g.jobs[id] = gpuSent{worker: worker, count: job.GPU.Count, timer: t}
}

func (g *gpuInflight) done(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok := g.jobs[id]; ok {
		s.timer.Stop()
		delete(g.jobs, id)
	}
}

// busy returns adverts with, on each worker, at least as many of the
// devices that fit r marked busy as this frontend has jobs' devices
// there. The records themselves are not changed.
func (g *gpuInflight) busy(adverts []envspec.Advert, r envspec.GPURequest) []envspec.Advert {
	g.mu.Lock()
	held := map[string]int{}
	for _, s := range g.jobs {
		held[s.worker] += s.count
	}
	g.mu.Unlock()
	if len(held) == 0 {
		return adverts
	}
	out := slices.Clone(adverts)
	for i, a := range out {
		n := held[a.WorkerID]
		if n == 0 {
			continue
		}
		gpus := slices.Clone(a.GPUs)
		for _, d := range gpus {
			if d.Busy {
				n--
			}
		}
		for j := range gpus {
			if n > 0 && !gpus[j].Busy && r.Fits(gpus[j]) {
				gpus[j].Busy = true
				n--
			}
		}
		out[i].GPUs = gpus
	}
	return out
}

// announceGPUWait tells the caller, in a progress notification when the
// call asked for progress, where its queued job waits for devices (msg,
// from gpuWaitMessage; "" says nothing): after the notification that named
// the job (progress 0), so its progress is 1.
func (f *Frontend) announceGPUWait(ctx context.Context, job *wire.Job, msg string) {
	token, _ := ctx.Value(progressTokenKey{}).(mcp.ProgressToken)
	srv := server.ServerFromContext(ctx)
	if msg == "" || token == nil || srv == nil {
		return
	}
	if err := srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
		"progressToken": token, "progress": 1, "message": msg,
	}); err != nil {
		f.log.Debug("announce gpu wait", "job", job.ID, "err", err)
	}
}

// gpuWaitMessage says where a queued GPU job waits.
func gpuWaitMessage(job *wire.Job, p envspec.GPUPlacement, adverts []envspec.Advert) string {
	msg := fmt.Sprintf("queued for %s on worker %s: %d of its %d matching devices free and %d jobs waiting at its last heartbeat (position about %d)",
		job.GPU, p.WorkerID, p.Free, p.Matching, p.Ahead, p.Ahead+1)
	for _, a := range adverts {
		if a.WorkerID == p.WorkerID && a.GPUJobMS > 0 {
			rounds := (p.Ahead + job.GPU.Count + p.Matching - 1) / p.Matching
			est := time.Duration(float64(rounds)*a.GPUJobMS) * time.Millisecond
			msg += fmt.Sprintf("; recent GPU jobs there took %s on average, so about %s", (time.Duration(a.GPUJobMS) * time.Millisecond).Round(time.Millisecond), est.Round(time.Second))
		}
	}
	return msg
}

// GPUResult is what a call's result says of the GPUs its job ran on.
type GPUResult struct {
	Devices []string `json:"devices" jsonschema_description:"the devices the job held and saw alone: index, model and UUID"`
	WaitMS  float64  `json:"wait_ms" jsonschema_description:"how long the job waited on its worker for them"`
	// PeakMemory is "N MiB", or "not reported" where the driver said nothing.
	PeakMemory string `json:"peak_memory" jsonschema_description:"the most GPU memory the job used on its devices, sampled from the driver, or 'not reported'"`
}

// gpuResult renders a result's GPU usage; nil for a job without GPUs.
func gpuResult(u *wire.GPUUsage) *GPUResult {
	if u == nil {
		return nil
	}
	out := &GPUResult{WaitMS: u.WaitMS, PeakMemory: "not reported"}
	for _, d := range u.Devices {
		name := fmt.Sprintf("%d: %s", d.Index, d.Name())
		if d.Model != "" {
			name += " (" + d.Model + ")"
		}
		out.Devices = append(out.Devices, name)
	}
	if u.PeakReported {
		out.PeakMemory = fmt.Sprintf("%d MiB", u.PeakMemoryMB)
	}
	return out
}

// gpuLine is the GPU part of a result's status line.
func gpuLine(u *wire.GPUUsage) string { return gpuResult(u).line() }

// line is the GPU part of a result's status line; "" for none.
func (g *GPUResult) line() string {
	if g == nil {
		return ""
	}
	s := " | GPU"
	for i, d := range g.Devices {
		if i > 0 {
			s += ","
		}
		s += " " + d
	}
	s += ", peak memory " + g.PeakMemory
	if g.WaitMS >= 1 {
		s += fmt.Sprintf(", waited %.0f ms for it", g.WaitMS)
	}
	return s
}
