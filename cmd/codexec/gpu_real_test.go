package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/codexec/codexec/frontend"
)

// TestRealGPU checks GPU pools on a machine with NVIDIA GPUs, through an
// MCP client against a worker that finds them itself (/dev, the driver's
// files, nvidia-smi). It runs only when asked (CODEXEC_REAL_GPU=1; see
// deploy/gpu-check.sh, which prepares it), with CODEXEC_GPU_CHECK_VENV a
// virtual environment that has a CUDA build of PyTorch. It checks: a job
// asking for one GPU sees exactly one (torch.cuda.device_count()), its
// own node in /dev and no other GPU's; a matrix multiply on it gives the
// right answer; the result names the device and its peak memory as
// nvidia-smi reports it; two jobs at once run on two devices (on a
// machine with two or more) or one after the other (with one).
func TestRealGPU(t *testing.T) {
	if os.Getenv("CODEXEC_REAL_GPU") != "1" {
		t.Skip("not asked: CODEXEC_REAL_GPU=1 runs it on a machine with NVIDIA GPUs (deploy/gpu-check.sh)")
	}
	venv := os.Getenv("CODEXEC_GPU_CHECK_VENV")
	if venv == "" {
		t.Fatal("CODEXEC_GPU_CHECK_VENV must name a venv with a CUDA build of PyTorch")
	}
	out, err := exec.Command("nvidia-smi", "-L").Output()
	if err != nil {
		t.Fatalf("nvidia-smi -L: %v", err)
	}
	gpus := strings.Count(string(out), "GPU ")
	t.Logf("nvidia-smi -L:\n%s", out)
	cl := startClusterArgs(t, [][]string{{"--venv", venv, "--concurrency", "4"}})
	c := httpClient(t, cl.mcpURL)

	const matmul = `import os, time, torch
n = torch.cuda.device_count()
dev = sorted(x for x in os.listdir('/dev') if x.startswith('nvidia'))
a = torch.ones(4096, 4096, device='cuda')
b = (a @ a).sum().item()
torch.cuda.synchronize()
time.sleep(%g)
print(n, b == 4096.0 ** 3, os.environ.get('CUDA_VISIBLE_DEVICES'), ' '.join(dev))
`
	res, er := call(t, c, "execute_code", map[string]any{"code": fmt.Sprintf(matmul, 1.0), "gpu": map[string]any{"count": 1}, "timeout_seconds": 300})
	t.Logf("one job: %s", text(res))
	if res.IsError || er.GPU == nil {
		t.Fatalf("isError=%v %+v", res.IsError, er)
	}
	f := strings.Fields(er.Stdout)
	if len(f) < 4 || f[0] != "1" || f[1] != "True" {
		t.Errorf("the job saw %q: want one device and a right product", er.Stdout)
	}
	if strings.Count(er.Stdout, "nvidia") > 1+4 { // its node and at most four control nodes
		t.Errorf("the job sees more GPU nodes than its own: %q", er.Stdout)
	}
	if er.GPU.PeakMemory == "not reported" || er.GPU.PeakMemory == "0 MiB" {
		t.Errorf("peak memory %q: the driver should report the job's use", er.GPU.PeakMemory)
	}

	var wg sync.WaitGroup
	results := make([]frontend.ExecResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = call(t, c, "execute_code", map[string]any{"code": fmt.Sprintf(matmul, 3.0), "gpu": map[string]any{"count": 1}, "timeout_seconds": 300})
		}()
	}
	wg.Wait()
	for _, r := range results {
		t.Logf("two jobs: %s on %v, waited %.0f ms, peak %s", strings.TrimSpace(r.Stdout), r.GPU.Devices, r.GPU.WaitMS, r.GPU.PeakMemory)
		if r.Status != "ok" {
			t.Errorf("%+v", r)
		}
	}
	if gpus >= 2 && results[0].GPU.Devices[0] == results[1].GPU.Devices[0] {
		t.Errorf("with %d GPUs two jobs ran on one device: %v", gpus, results[0].GPU.Devices)
	}
	if gpus == 1 && results[0].GPU.WaitMS < 1 && results[1].GPU.WaitMS < 1 {
		t.Error("with one GPU neither of two jobs waited for it")
	}
}
