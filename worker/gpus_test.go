package worker

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/gpu/gputest"
)

// gpuWorker starts a worker whose GPUs are a fake tree of n devices
// (character devices with /dev/null's numbers when the test runs as root,
// empty files otherwise).
func gpuWorker(t *testing.T, ctx context.Context, fx *lifecycleFixture, id string, n, concurrency int) (*Worker, gputest.Tree) {
	t.Helper()
	gpus := make([]gputest.GPU, n)
	for i := range gpus {
		gpus[i] = gputest.GPU{Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}
	}
	tree, err := gputest.Write(t.TempDir(), gpus, os.Geteuid() == 0)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{
		ID: id, DataDir: filepath.Join(fx.dataDir, id), Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
		Concurrency: concurrency, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
		GPURoot: tree.Root, NvidiaSMI: tree.SMI,
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, tree
}

// runGPUJob sends code, asking for req, to w's own subject and returns its
// result.
func runGPUJob(ctx context.Context, t *testing.T, fx *lifecycleFixture, w *Worker, code string, req *envspec.GPURequest, timeout time.Duration) *wire.Result {
	t.Helper()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "gpu-" + strings.ToLower(ulid.Make().String()[20:]),
		Code: code, Filename: "main.py", TimeoutMS: timeout.Milliseconds(), Deadline: time.Now().Add(2 * time.Minute).UTC(), GPU: req,
	}
	if err := fx.broker.PublishJob(ctx, job, broker.ToWorker(w.ID())); err != nil {
		t.Error(err)
		return nil
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Error(err)
		return nil
	}
	return res
}

// seeDevices lists what a job sees of the GPU nodes, its variables, and
// which nodes it could open, then holds its device for a while.
const seeDevices = `import json, os, time
dev = sorted(n for n in os.listdir('/dev') if n.startswith('nvidia'))
opened = []
for i in range(8):
    try:
        os.close(os.open('/dev/nvidia%d' % i, os.O_RDWR))
        opened.append(i)
    except OSError:
        pass
time.sleep(0.5)
print(json.dumps({'dev': dev, 'opened': opened, 'cuda': os.environ.get('CUDA_VISIBLE_DEVICES'), 'nvidia': os.environ.get('NVIDIA_VISIBLE_DEVICES')}))
`

type seen struct {
	Dev    []string `json:"dev"`
	Opened []int    `json:"opened"`
	CUDA   string   `json:"cuda"`
	NVIDIA string   `json:"nvidia"`
}

// Three jobs on a worker with three fake GPUs, at once: each holds one
// device no other job holds, sees that device's node and the driver's
// control nodes in /dev and no other GPU's, can open its own node and no
// other, and is told its device in CUDA_VISIBLE_DEVICES. The result names
// the device and its peak memory as the (fake) driver reports it.
func TestGPUJobsSeeOnlyTheirOwnDevice(t *testing.T) {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, tree := gpuWorker(t, ctx, fx, "gpu-see", 3, 3)
	if err := tree.SetApps(gputest.UUID(1) + ", 2048\n"); err != nil {
		t.Fatal(err)
	}
	results := make([]*wire.Result, 3)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = runGPUJob(ctx, t, fx, w, seeDevices, &envspec.GPURequest{Count: 1}, time.Minute)
		}()
	}
	wg.Wait()
	used := map[string]bool{}
	for _, res := range results {
		if res == nil {
			t.FailNow()
		}
		if res.Status != wire.StatusOK || res.GPU == nil || len(res.GPU.Devices) != 1 {
			t.Fatalf("status %s %s, gpu %+v\nstderr %s", res.Status, res.Message, res.GPU, res.Stderr)
		}
		d := res.GPU.Devices[0]
		if used[d.UUID] {
			t.Errorf("two jobs ran on %s", d.UUID)
		}
		used[d.UUID] = true
		var s seen
		if err := json.Unmarshal([]byte(res.Stdout), &s); err != nil {
			t.Fatalf("%v: %q", err, res.Stdout)
		}
		if s.CUDA != d.UUID || s.NVIDIA != d.UUID {
			t.Errorf("job on %s was told CUDA_VISIBLE_DEVICES=%q NVIDIA_VISIBLE_DEVICES=%q", d.UUID, s.CUDA, s.NVIDIA)
		}
		wantPeak := int64(0)
		if d.UUID == gputest.UUID(1) {
			wantPeak = 2048
		}
		if !res.GPU.PeakReported || res.GPU.PeakMemoryMB != wantPeak {
			t.Errorf("job on %s: peak %d MiB reported %v, want %d", d.UUID, res.GPU.PeakMemoryMB, res.GPU.PeakReported, wantPeak)
		}
		if w.box == nil {
			continue // without a sandbox the job sees the host's /dev
		}
		own := "nvidia" + string(rune('0'+d.Index))
		want := []string{own, "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"}
		slices.Sort(want)
		if !slices.Equal(s.Dev, want) {
			t.Errorf("job on %s sees /dev/%v, want exactly %v", own, s.Dev, want)
		}
		if os.Geteuid() == 0 && !slices.Equal(s.Opened, []int{d.Index}) {
			t.Errorf("job on %s opened GPU nodes %v, want only its own (%d)", own, s.Opened, d.Index)
		}
	}
}

// A request the worker cannot ever serve is refused at once, saying what
// it has; a worker without GPUs refuses any GPU job.
func TestGPUJobRefusedWhenItNeverFits(t *testing.T) {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, _ := gpuWorker(t, ctx, fx, "gpu-refuse", 2, 2)
	res := runGPUJob(ctx, t, fx, w, "print(1)", &envspec.GPURequest{Count: 3}, time.Minute)
	if res == nil || res.Status != wire.StatusRejected || !strings.Contains(res.Message, "2 of its 2 devices fit") {
		t.Fatalf("3 GPUs of 2: %+v", res)
	}
	res = runGPUJob(ctx, t, fx, w, "print(1)", &envspec.GPURequest{Count: 1, MinMemoryMB: 100000}, time.Minute)
	if res == nil || res.Status != wire.StatusRejected || !strings.Contains(res.Message, "0 of its 2 devices fit") {
		t.Fatalf("100000 MiB: %+v", res)
	}
}

// A job killed at its timeout, whose children outlive it, gives its device
// back once they are gone: the next job on the worker's one device runs.
func TestKilledGPUJobFreesItsDevice(t *testing.T) {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, _ := gpuWorker(t, ctx, fx, "gpu-kill", 1, 2)
	const hang = `import os, signal, subprocess, time
subprocess.Popen(['sleep', '1000'], start_new_session=True)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print('holding', flush=True)
time.sleep(1000)
`
	first := runGPUJob(ctx, t, fx, w, hang, &envspec.GPURequest{Count: 1}, time.Second)
	if first == nil || first.Status != wire.StatusTimeout {
		t.Fatalf("the hanging job: %+v", first)
	}
	second := runGPUJob(ctx, t, fx, w, "print('after')", &envspec.GPURequest{Count: 1}, time.Minute)
	if second == nil || second.Status != wire.StatusOK || second.GPU == nil || second.GPU.Devices[0].UUID != gputest.UUID(0) {
		t.Fatalf("the next job: %+v", second)
	}
}

// A job whose devices stay busy until it could no longer end before its
// deadline does not start: its result says it expired, and nothing ran.
func TestGPUJobThatCannotStartInTimeExpires(t *testing.T) {
	fx := newLifecycleFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	w, _ := gpuWorker(t, ctx, fx, "gpu-expire", 1, 2)
	first := make(chan *wire.Result, 1)
	go func() {
		first <- runGPUJob(ctx, t, fx, w, "import time; time.sleep(5)", &envspec.GPURequest{Count: 1}, time.Minute)
	}()
	for !w.gpus.alloc.Devices()[0].Busy {
		time.Sleep(10 * time.Millisecond)
	}
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: "gpu-late",
		Code: "print('ran')", Filename: "main.py", TimeoutMS: 1000, Deadline: time.Now().Add(2 * time.Second).UTC(),
		GPU: &envspec.GPURequest{Count: 1},
	}
	if err := fx.broker.PublishJob(ctx, job, broker.ToWorker(w.ID())); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != wire.StatusExpired || res.Stdout != "" || !strings.Contains(res.Message, "nothing ran") {
		t.Errorf("the late job: %s %q, stdout %q", res.Status, res.Message, res.Stdout)
	}
	if r := <-first; r == nil || r.Status != wire.StatusOK {
		t.Errorf("the first job: %+v", r)
	}
}
