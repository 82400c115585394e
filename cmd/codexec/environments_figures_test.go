package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
	"github.com/mark3labs/mcp-go/client"
)

// BenchmarkEnvironmentFigures measures the environment figures of the
// documentation (derivation times are envcache's BenchmarkDeriveUV and
// BenchmarkDeriveVenvPip):
//
//	go test ./cmd/codexec -run '^$' -bench 'EnvironmentFigures/overhead' -benchtime 200x
//	go test ./cmd/codexec -run '^$' -bench 'EnvironmentFigures/placement' -benchtime 5x
//
// A benchmark rather than a test: its figures are timings and rates, which
// no test may assert. Placement also checks what its rate rests on, which
// is not a timing: with both workers alive, every job runs on the worker
// holding its environment, so anything under 100% fails the benchmark.
func BenchmarkEnvironmentFigures(b *testing.B) {
	requireUV(b)

	// One op: a print(1) job in the default environment and one in a
	// cached uv environment, alternating, through codexec dev over HTTP.
	b.Run("overhead", func(b *testing.B) {
		_, url := devWheelhouse(b, b.TempDir(), wheelhouse(b), "uv,venv")
		def, env := httpClient(b, url), httpClient(b, url)
		if res, er := envCall(b, env, "configure_environment", map[string]any{"type": "venv-uv", "packages": []any{"alpha"}}); res.IsError {
			b.Fatal(er.Message)
		}
		// Both zygotes warm: the first call of each environment waits for its own.
		for _, c := range []*client.Client{def, env} {
			if res, ex := call(b, c, "execute_code", map[string]any{"code": "print(1)"}); res.IsError {
				b.Fatal(ex.Message)
			}
		}
		time.Sleep(2 * time.Second)
		var dd, de []time.Duration
		b.ResetTimer()
		for range b.N {
			for _, c := range []*client.Client{def, env} {
				start := time.Now()
				if res, ex := call(b, c, "execute_code", map[string]any{"code": "print(1)"}); res.IsError {
					b.Fatal(ex.Message)
				}
				if c == def {
					dd = append(dd, time.Since(start))
				} else {
					de = append(de, time.Since(start))
				}
			}
		}
		b.ReportMetric(e2e.Percentile(dd, 50), "default-p50-ms")
		b.ReportMetric(e2e.Percentile(de, 50), "uv-env-p50-ms")
	})

	// One op: a print(1) job for each of ten sessions, each with its own
	// environment spec, on a cluster of two workers.
	b.Run("placement", func(b *testing.B) {
		common := []string{"--no-index", "--find-links", wheelhouse(b), "--managers", "uv,venv"}
		cl := startClusterArgs(b, [][]string{common, common})
		pkgs := [][]any{{"alpha"}, {"beta==1.0"}, {"beta==2.0"}, {"gamma"}, {"scikit-fake"},
			{"alpha", "beta==1.0"}, {"alpha", "beta==2.0"}, {"gamma", "scikit-fake"}, {"alpha", "scikit-fake"}, {"beta==1.0", "gamma"}}
		holder := map[int]string{}
		clients := map[int]*client.Client{}
		for i, p := range pkgs {
			c := httpClient(b, cl.mcpURL)
			res, er := envCall(b, c, "configure_environment", map[string]any{"type": "venv-uv", "packages": p})
			if res.IsError {
				b.Fatal(er.Message)
			}
			holder[i], clients[i] = er.WorkerID, c
		}
		hits, total := 0, 0
		perWorker := map[string]int{}
		b.ResetTimer()
		for range b.N {
			for i := range pkgs {
				res, ex := call(b, clients[i], "execute_code", map[string]any{"code": "print(1)"})
				if res.IsError {
					b.Fatalf("session %d: %s", i, ex.Message)
				}
				total++
				perWorker[ex.WorkerID]++
				if ex.WorkerID == holder[i] {
					hits++
				} else {
					b.Errorf("session %d (%v): the job ran on %s, not on %s, which holds its environment", i, pkgs[i], ex.WorkerID, holder[i])
				}
			}
		}
		b.StopTimer()
		b.ReportMetric(100*float64(hits)/float64(total), "hit-%")
		b.Logf("%d of %d jobs ran on the worker holding their environment; builds per worker %v; jobs per worker %v",
			hits, total, countValues(holder), perWorker)
	})
}

func countValues(m map[int]string) string {
	c := map[string]int{}
	for _, v := range m {
		c[v]++
	}
	return fmt.Sprint(c)
}

// BenchmarkInstallFigures measures install_dependencies from PyPI through
// codexec dev over stdio, on a fresh data directory each op, on a machine
// without uv on PATH: "uv" fetches uv at start (the default), "pip" is the
// fallback (--fetch-uv=false). first-ms is the first install (six) into a
// new environment, next-ms one more package (iniconfig) on top of it, and
// start-ms the time from start to the first answer (the fetch included).
//
//	go test ./cmd/codexec -run '^$' -bench InstallFigures -benchtime 5x
func BenchmarkInstallFigures(b *testing.B) {
	requirePyPI(b)
	for _, mode := range []struct{ name, fetch string }{{"uv", "true"}, {"pip", "false"}} {
		b.Run(mode.name, func(b *testing.B) {
			var starts, firsts, nexts []time.Duration
			for range b.N {
				t0 := time.Now()
				c := devStdioMinimal(b, b.TempDir(), "CODEXEC_MANAGERS=uv,venv", "PATH="+pathWithoutUV(), "CODEXEC_FETCH_UV="+mode.fetch)
				if res, _ := envCall(b, c, "get_environment_config", nil); res.IsError {
					b.Fatal(text(res))
				}
				starts = append(starts, time.Since(t0))
				for i, pkg := range []string{"six", "iniconfig"} {
					t1 := time.Now()
					res, er := envCall(b, c, "install_dependencies", map[string]any{"packages": []any{pkg}})
					if res.IsError || er.Spec == nil {
						b.Fatalf("install %s: %s", pkg, text(res))
					}
					if want := map[string]string{"uv": "uv", "pip": "venv"}[mode.name]; er.Spec.Manager != want {
						b.Fatalf("install %s used %s, want %s", pkg, er.Spec.Manager, want)
					}
					if i == 0 {
						firsts = append(firsts, time.Since(t1))
					} else {
						nexts = append(nexts, time.Since(t1))
					}
				}
			}
			b.ReportMetric(e2e.Percentile(starts, 50), "start-ms")
			b.ReportMetric(e2e.Percentile(firsts, 50), "first-ms")
			b.ReportMetric(e2e.Percentile(nexts, 50), "next-ms")
		})
	}
}
