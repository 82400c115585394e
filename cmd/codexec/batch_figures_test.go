package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/mark3labs/mcp-go/client"
)

// BenchmarkBatchFigures measures the batch figures of docs/batch.md in one
// run, on one machine, with batch jobs given two of a worker's eight slots
// (the default) and all eight: codexec dev over HTTP, interactive print(1) calls
// on an idle system, then `codexec batch --url` running
// $CODEXEC_BATCH_FIGURE_JOBS (default 1000) short scripts through the same
// frontend while the same calls go on, then the batch's wall time, rate,
// peak memory of each process and jobs lost:
//
//	CODEXEC_BATCH_FIGURE_JOBS=2000 go test ./cmd/codexec -run '^$' -bench BatchFigures -benchtime 1x
//
// A benchmark rather than a test: its figures are timings, which no test
// may assert. Jobs lost is not a timing: any lost job fails it.
func BenchmarkBatchFigures(b *testing.B) {
	jobs := 1000
	if v, err := strconv.Atoi(os.Getenv("CODEXEC_BATCH_FIGURE_JOBS")); err == nil && v > 0 {
		jobs = v
	}
	// The worker's eight slots: batch jobs in two of them (the default,
	// a quarter), then in all eight.
	for _, slots := range []int{2, 8} {
		b.Run(fmt.Sprintf("batch-slots=%d", slots), func(b *testing.B) { batchFigures(b, jobs, slots) })
	}
}

func batchFigures(b *testing.B, jobs, slots int) {
	tmp := b.TempDir()
	server := startProc(b, codexecEnv("CODEXEC_DATA_DIR="+filepath.Join(tmp, "server"), "CODEXEC_VENV="+venvFor(b),
		"CODEXEC_CONCURRENCY=8", fmt.Sprintf("CODEXEC_BATCH_CONCURRENCY=%d", slots)), os.Args[0],
		"dev", "--http", "127.0.0.1:0")
	url := server.waitFor(b, urlRe, 2*time.Minute)
	c := httpClient(b, url)
	for range 5 { // the zygote warm
		interactive(b, c)
	}
	const calls = 100
	var idle []time.Duration
	for range calls {
		idle = append(idle, interactive(b, c))
	}

	writeFiles(b, tmp, map[string]string{"job.py": "import json, os\np = json.loads(os.environ['CODEXEC_PARAMS'])\nprint(sum(i * i for i in range(20000)) + p['i'])\n"})
	var rows strings.Builder
	for i := range jobs {
		rows.WriteString(`{"i": ` + strconv.Itoa(i) + "}\n")
	}
	writeFiles(b, tmp, map[string]string{"rows.jsonl": rows.String()})
	out := filepath.Join(tmp, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "batch", "--url", url, "--script", filepath.Join(tmp, "job.py"),
		"--params", filepath.Join(tmp, "rows.jsonl"), "--out", out, "--progress-every", "30s")
	cmd.Env = batchEnv(b, filepath.Join(tmp, "client"))
	var log e2e.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	b.ResetTimer()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Interactive calls while the batch fills the pool, a quarter of a second
	// apart: from a second on, until the batch ends.
	time.Sleep(time.Second)
	var busy []time.Duration
	var err error
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-time.After(250 * time.Millisecond): // an agent's pace, not a flood
			busy = append(busy, interactive(b, c))
		}
	}
	wall := time.Since(start)
	b.StopTimer()
	if err != nil {
		b.Fatalf("batch: %v\n%s", err, log.String())
	}
	lines := readResults(b, out)
	ok := 0
	for _, l := range lines {
		if l.Status == "ok" {
			ok++
		}
	}
	if ok != jobs {
		b.Fatalf("%d of %d jobs ok (%d results): jobs lost or failed\n%s", ok, jobs, len(lines), log.String())
	}
	b.ReportMetric(float64(jobs), "jobs")
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(float64(jobs)/wall.Seconds(), "jobs/s")
	b.ReportMetric(float64(jobs-ok), "lost")
	b.ReportMetric(float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)/1024, "client-peak-MiB")
	b.ReportMetric(peakMiB(b, server.Pid()), "server-peak-MiB")
	b.ReportMetric(e2e.Percentile(idle, 50), "idle-p50-ms")
	b.ReportMetric(e2e.Percentile(idle, 99), "idle-p99-ms")
	b.ReportMetric(e2e.Percentile(busy, 50), "batch-p50-ms")
	b.ReportMetric(e2e.Percentile(busy, 99), "batch-p99-ms")
	b.ReportMetric(float64(len(busy)), "batch-calls")
}

// interactive is one print(1) call's latency.
func interactive(b *testing.B, c *client.Client) time.Duration {
	t0 := time.Now()
	if res, er := call(b, c, "execute_code", map[string]any{"code": "print(1)"}); res.IsError || er.Stdout != "1\n" {
		b.Fatalf("print(1): %+v", er)
	}
	return time.Since(t0)
}

// peakMiB is the peak resident memory (VmHWM) of process pid, in MiB.
func peakMiB(b *testing.B, pid int) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM")
	return 0
}
