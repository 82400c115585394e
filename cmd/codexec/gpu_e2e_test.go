package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/worker/gpu/gputest"
)

// gpuCluster is a cluster of two workers with fake GPUs: w1 has two
// "NVIDIA H100 80GB HBM3" (81559 MiB), w2 two "NVIDIA L4" (23034 MiB) and
// the label zone=eu. The device nodes are character devices with
// /dev/null's numbers when the test runs as root (empty files otherwise).
func gpuCluster(t *testing.T) *cluster {
	t.Helper()
	h100 := gputest.GPU{Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559}
	l4 := gputest.GPU{Model: "NVIDIA L4", MemoryMB: 23034}
	var args [][]string
	for i, gpus := range [][]gputest.GPU{{h100, h100}, {l4, l4}} {
		tree, err := gputest.Write(t.TempDir(), gpus, os.Geteuid() == 0)
		if err != nil {
			t.Fatal(err)
		}
		a := []string{"--gpu-root", tree.Root, "--nvidia-smi", tree.SMI, "--concurrency", "4"}
		if i == 1 {
			a = append(a, "--labels", "zone=eu")
		}
		args = append(args, a)
	}
	return startClusterArgs(t, args)
}

// gpuProbe is what a GPU job reports of itself: when it ran (the host's
// clock), which GPU nodes it saw in /dev and could open, and its
// CUDA_VISIBLE_DEVICES.
const gpuProbe = `import json, os, time
start = time.time()
dev = sorted(n for n in os.listdir('/dev') if n.startswith('nvidia'))
opened = []
for i in range(4):
    try:
        os.close(os.open('/dev/nvidia%%d' %% i, os.O_RDWR))
        opened.append(i)
    except OSError:
        pass
time.sleep(%g)
print(json.dumps({'start': start, 'end': time.time(), 'dev': dev, 'opened': opened, 'cuda': os.environ.get('CUDA_VISIBLE_DEVICES')}))
`

type gpuSeen struct {
	Start, End float64
	Dev        []string
	Opened     []int
	CUDA       string
}

func probe(t *testing.T, er frontend.ExecResult) gpuSeen {
	t.Helper()
	var s gpuSeen
	if err := json.Unmarshal([]byte(er.Stdout), &s); err != nil {
		t.Fatalf("%v: %+v", err, er)
	}
	return s
}

// Through an MCP client against two workers with fake GPUs: requests are
// placed on free devices, queued behind busy ones (the caller is told
// where, behind whom), refused when no worker has what they ask; no two
// jobs run on one device at once; a job sees and opens its own device
// node only; a job killed at its timeout gives its devices back.
func TestClusterGPUs(t *testing.T) {
	t.Parallel()
	cl := gpuCluster(t)
	c := httpClient(t, cl.mcpURL)

	t.Run("placed", func(t *testing.T) {
		type ran struct {
			worker, device string
			seen           gpuSeen
		}
		var mu sync.Mutex
		var runs []ran
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, er := call(t, c, "execute_code", map[string]any{"code": fmt.Sprintf(gpuProbe, 1.0), "gpu": map[string]any{"count": 1}})
				if res.IsError || er.GPU == nil || len(er.GPU.Devices) != 1 {
					t.Errorf("isError=%v %+v", res.IsError, er)
					return
				}
				s := probe(t, er)
				mu.Lock()
				runs = append(runs, ran{er.WorkerID, er.GPU.Devices[0], s})
				mu.Unlock()
				if er.GPU.PeakMemory != "0 MiB" {
					t.Errorf("peak memory %q; the fake driver reports no process: want 0 MiB", er.GPU.PeakMemory)
				}
				if !strings.Contains(text(res), "| GPU ") {
					t.Errorf("the text result does not name the GPU: %q", text(res))
				}
			}()
		}
		wg.Wait()
		for i, a := range runs {
			idx := strings.SplitN(a.device, ":", 2)[0]
			if !strings.Contains(a.device, a.seen.CUDA) || a.seen.CUDA == "" {
				t.Errorf("job on %s was told CUDA_VISIBLE_DEVICES=%q", a.device, a.seen.CUDA)
			}
			want := []string{"nvidia" + idx, "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl"}
			slices.Sort(want)
			if !slices.Equal(a.seen.Dev, want) {
				t.Errorf("job on %s %s sees /dev/%v, want exactly %v", a.worker, a.device, a.seen.Dev, want)
			}
			if os.Geteuid() == 0 && (len(a.seen.Opened) != 1 || fmt.Sprint(a.seen.Opened[0]) != idx) {
				t.Errorf("job on %s opened GPU nodes %v, want only its own", a.device, a.seen.Opened)
			}
			for _, b := range runs[i+1:] {
				if a.worker == b.worker && a.device == b.device && a.seen.Start < b.seen.End && b.seen.Start < a.seen.End {
					t.Errorf("two jobs ran on %s %s at once: %+v and %+v", a.worker, a.device, a.seen, b.seen)
				}
			}
		}
	})

	t.Run("queued", func(t *testing.T) {
		h100 := map[string]any{"count": 1, "model": "h100"}
		long := make(chan frontend.ExecResult, 2)
		for range 2 {
			go func() {
				_, er := call(t, c, "execute_code", map[string]any{"code": fmt.Sprintf(gpuProbe, 3.0), "gpu": h100})
				long <- er
			}()
		}
		// Both H100s are leased: the third call waits for one.
		waitGPUsBusy(t, cl, "w1", 2)
		notes := make(chan string, 16)
		c.OnNotification(func(n mcp.JSONRPCNotification) {
			if msg, _ := n.Params.AdditionalFields["message"].(string); n.Method == "notifications/progress" {
				notes <- msg
			}
		})
		req := mcp.CallToolRequest{}
		req.Params.Name = "execute_code"
		req.Params.Arguments = map[string]any{"code": fmt.Sprintf(gpuProbe, 0.1), "gpu": h100}
		req.Params.Meta = &mcp.Meta{ProgressToken: "gpu-queued"}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := c.CallTool(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var er frontend.ExecResult
		if err := e2e.Decode(res, &er); err != nil {
			t.Fatal(err)
		}
		if res.IsError || er.WorkerID != "w1" || er.GPU == nil || er.GPU.WaitMS <= 0 {
			t.Fatalf("the queued call: isError=%v %+v", res.IsError, er)
		}
		queued := false
		for len(notes) > 0 {
			msg := <-notes
			queued = queued || strings.Contains(msg, `queued for 1 GPU, model "h100" on worker w1`) && strings.Contains(msg, "position about")
		}
		if !queued {
			t.Error("the caller was not told where its job waits")
		}
		first, second := <-long, <-long
		s := probe(t, er)
		if end := min(probe(t, first).End, probe(t, second).End); s.Start < end {
			t.Errorf("the queued job started at %f, before either H100 job ended (%f)", s.Start, end)
		}
	})

	t.Run("refused", func(t *testing.T) {
		for _, req := range []map[string]any{{"count": 3}, {"model": "A100"}, {"min_memory_mb": 90000}, {"count": 2, "label": "zone=us"}} {
			res, er := call(t, c, "execute_code", map[string]any{"code": "print('ran')", "gpu": req})
			if !res.IsError || er.Status != "rejected" || !strings.Contains(er.Message, "NVIDIA H100 80GB HBM3 81559 MiB") || !strings.Contains(er.Message, "NVIDIA L4 23034 MiB") {
				t.Errorf("%v: isError=%v %+v", req, res.IsError, er)
			}
		}
		res, er := call(t, c, "execute_code", map[string]any{"code": "print('ran')", "gpu": map[string]any{"count": 2, "label": "zone=eu"}})
		if res.IsError || er.WorkerID != "w2" || len(er.GPU.Devices) != 2 {
			t.Errorf("label zone=eu: isError=%v %+v", res.IsError, er)
		}
		res, er = call(t, c, "execute_code", map[string]any{"code": "print('ran')", "gpu": map[string]any{"count": "two"}})
		if !res.IsError || er.Status != "rejected" {
			t.Errorf("count \"two\": isError=%v %+v", res.IsError, er)
		}
	})

	t.Run("killed job frees its devices", func(t *testing.T) {
		both := map[string]any{"count": 2, "model": "H100"}
		hang := "import signal, subprocess, time\nsubprocess.Popen(['sleep', '1000'], start_new_session=True)\n" +
			"signal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('holding', flush=True)\ntime.sleep(1000)\n"
		res, er := call(t, c, "execute_code", map[string]any{"code": hang, "gpu": both, "timeout_seconds": 1})
		if !res.IsError || er.Status != "timeout" {
			t.Fatalf("the hanging job: %+v", er)
		}
		res, er = call(t, c, "execute_code", map[string]any{"code": "print('after')", "gpu": both})
		if res.IsError || er.Stdout != "after\n" || er.WorkerID != "w1" {
			t.Fatalf("the next job on both H100s: isError=%v %+v", res.IsError, er)
		}
	})
}

// waitGPUsBusy waits until worker's presence record shows n of its
// devices busy.
func waitGPUsBusy(t *testing.T, cl *cluster, worker string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: cl.redisURL})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for {
		members, err := st.Members(ctx, statestore.Keys{Prefix: statestore.DefaultPrefix}.Workers())
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range envspec.DecodeAdverts(members) {
			busy := 0
			for _, g := range a.GPUs {
				if g.Busy {
					busy++
				}
			}
			if a.WorkerID == worker && busy == n {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never showed %d busy devices", worker, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
