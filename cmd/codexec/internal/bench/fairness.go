package bench

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
)

// The fairness scenarios (-fairness): two sessions of one codexec dev
// served over HTTP, A and B. B's print(1) is measured sequentially on the
// idle server, then while A has a burst of jobs in flight at once; and A
// runs 8 time.sleep(0.25) calls at once. Each is measured twice in one run:
// "before", as codexec ran before jobs were admitted fairly (one job per
// CPU, no share: --concurrency <CPUs> --fair-share -1), and "after", with
// the defaults.

const (
	sleepJob = "import time\ntime.sleep(0.05)"
	// busyJob spends 50 ms of CPU, however the CPUs are shared.
	busyJob  = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.05:\n    pass"
	sleep8   = "import time\ntime.sleep(0.25)"
	sleepers = 8
)

// The bursts of A: names and code.
var (
	burstNames = []string{"time.sleep(0.05)", "50 ms busy loop"}
	burstCodes = []string{sleepJob, busyJob}
)

// fairnessSetup is one configuration the fairness scenarios run against.
type fairnessSetup struct {
	name string
	env  []string
}

func (b *bench) fairnessSetups() []fairnessSetup {
	return []fairnessSetup{
		{"before", []string{fmt.Sprintf("CODEXEC_CONCURRENCY=%d", runtime.NumCPU()), "CODEXEC_FAIR_SHARE=-1"}},
		{"after", nil},
	}
}

func (b *bench) fairnessScenarios(ctx context.Context) error {
	b.fairMode = "zygote"
	if b.sandboxList[len(b.sandboxList)-1] {
		b.fairMode += "+sandbox" // as deployed
	}
	for _, s := range b.fairnessSetups() {
		if err := b.fairnessServer(ctx, b.fairMode, s); err != nil {
			return err
		}
	}
	return nil
}

// fairnessServer runs the scenarios against one codexec dev configured as s.
func (b *bench) fairnessServer(ctx context.Context, mode string, s fairnessSetup) error {
	b.logf("fairness, %s: codexec dev over HTTP, exec mode %s %v", s.name, mode, s.env)
	env := append(b.devEnv(filepath.Join(b.tmp, "fair-"+s.name), mode), s.env...)
	args := []string{"dev", "--http", "127.0.0.1:0"}
	if b.fairTenants {
		tokens, err := writeFairTokens(filepath.Join(b.tmp, "fair-"+s.name+".tokens"))
		if err != nil {
			return err
		}
		args = append(args, "--auth", "tokens", "--auth-tokens", tokens)
	}
	p, err := b.start(e2e.Command{Name: "fair-" + s.name, Path: b.exe, Args: args, Env: env})
	if err != nil {
		return err
	}
	defer p.Stop(stopGrace)
	rctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	url, err := p.WaitFor(rctx, e2e.URLRe)
	if err != nil {
		return err
	}
	// Two tenants, each with its token (-fair-tenants), or two sessions of
	// one tenant, each its own scope, as two users behind an
	// authenticating proxy.
	a, err := e2e.ConnectHTTP(ctx, url, mcp.LATEST_PROTOCOL_VERSION, clientInfo(),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer bench-a"}))
	if err != nil {
		return err
	}
	defer a.Close()
	bc, err := e2e.ConnectHTTP(ctx, url, mcp.LATEST_PROTOCOL_VERSION, clientInfo(),
		transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer bench-b"}))
	if err != nil {
		return err
	}
	defer bc.Close()
	row := func(name, code string) benchResult {
		return benchResult{Name: s.name + ": " + name, Topology: "dev-http", Mode: mode, Code: code}
	}

	b.sequential(ctx, a, row("A print(1), idle", "print(1)"), min(b.n, 20), nil)
	b.sequential(ctx, bc, row("B print(1), idle", "print(1)"), b.n, nil)
	b.together(ctx, a, row(fmt.Sprintf("A %d x time.sleep(0.25) at once", sleepers), sleep8), sleepers)
	for i, name := range burstNames {
		b.duringBurst(ctx, a, bc, row(fmt.Sprintf("A %d x %s at once", b.burst, name), burstCodes[i]),
			row(fmt.Sprintf("B print(1), during A's %s burst", name), "print(1)"))
	}
	return nil
}

// together makes n calls of r.Code at once on c; the row's jobs/s is n
// over the time the last one took.
func (b *bench) together(ctx context.Context, c *client.Client, r benchResult, n int) time.Duration {
	var mu sync.Mutex
	var ds []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for range n {
		wg.Go(func() {
			t := time.Now()
			_, err := callExecute(ctx, c, r.Code)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				r.Errors++
				return
			}
			ds = append(ds, d)
		})
	}
	wg.Wait()
	wall := time.Since(start)
	r.Concurrency = n
	b.add(r, ds, nil, float64(len(ds))/wall.Seconds())
	b.logf("%s: all %d done in %.0f ms", r.Name, n, float64(wall.Microseconds())/1000)
	return wall
}

// duringBurst makes b.burst calls of burst.Code at once on a and, while
// they run, sequential print(1) calls on bc.
func (b *bench) duringBurst(ctx context.Context, a, bc *client.Client, burst, probe benchResult) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.together(ctx, a, burst, b.burst)
	}()
	// Let the burst reach the queue first.
	time.Sleep(200 * time.Millisecond)
	var ds []time.Duration
	for {
		select {
		case <-done:
			probe.Concurrency = 1
			b.add(probe, ds, nil, 0)
			return
		default:
		}
		t := time.Now()
		if _, err := callExecute(ctx, bc, probe.Code); err != nil {
			probe.Errors++
			continue
		}
		ds = append(ds, time.Since(t))
	}
}

// fairnessSummary pairs, per setup, B's p50 and p99 during each burst with
// its p50 on the idle server, measured in the same run.
func (b *bench) fairnessSummary() []fairnessRatio {
	var out []fairnessRatio
	for _, s := range b.fairnessSetups() {
		idle := b.find("dev-http", b.fairMode, s.name+": B print(1), idle")
		if idle == nil || idle.N == 0 {
			continue
		}
		for _, burst := range burstNames {
			r := b.find("dev-http", b.fairMode, fmt.Sprintf("%s: B print(1), during A's %s burst", s.name, burst))
			if r == nil || r.N == 0 {
				continue
			}
			out = append(out, fairnessRatio{Setup: s.name, Burst: burst, IdleP50: idle.P50, P50: r.P50, P99: r.P99,
				P50Ratio: e2e.Round2(r.P50 / idle.P50), P99Ratio: e2e.Round2(r.P99 / idle.P50)})
		}
	}
	return out
}

// fairnessRatio is B's latency during A's burst against B's idle p50.
type fairnessRatio struct {
	Setup    string  `json:"setup"`
	Burst    string  `json:"burst"`
	IdleP50  float64 `json:"idle_p50_ms"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
	P50Ratio float64 `json:"p50_over_idle_p50"`
	P99Ratio float64 `json:"p99_over_idle_p50"`
}

// writeFairTokens writes the --auth-tokens file of the fairness scenarios:
// bench-a is principal a of tenant tenant-a, bench-b principal b of
// tenant-b.
func writeFairTokens(path string) (string, error) {
	var lines string
	for _, t := range [][3]string{{"bench-a", "tenant-a", "a"}, {"bench-b", "tenant-b", "b"}} {
		sum := sha256.Sum256([]byte(t[0]))
		lines += fmt.Sprintf("sha256:%s %s %s\n", hex.EncodeToString(sum[:]), t[1], t[2])
	}
	return path, os.WriteFile(path, []byte(lines), 0o600)
}
