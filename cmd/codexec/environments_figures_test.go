package main

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
)

// TestEnvironmentFigures measures, when CODEXEC_ENV_FIGURES=1, the figures
// the README reports: the overhead of a job in a cached environment against
// the default one, and the placement hit rate of two workers serving ten
// environment specs. (Derivation times are envcache's BenchmarkDeriveUV and
// BenchmarkDeriveVenvPip.) It is a measurement, not a test: it asserts
// nothing about the numbers.
func TestEnvironmentFigures(t *testing.T) {
	if os.Getenv("CODEXEC_ENV_FIGURES") != "1" {
		t.Skip("set CODEXEC_ENV_FIGURES=1 to measure")
	}
	wh := wheelhouse(t)
	t.Run("overhead", func(t *testing.T) {
		p := startProc(t, codexecEnv("CODEXEC_DATA_DIR="+t.TempDir(), "CODEXEC_VENV="+venvFor(t),
			"CODEXEC_NO_INDEX=true", "CODEXEC_FIND_LINKS="+wh, "CODEXEC_MANAGERS=uv,venv"),
			os.Args[0], "dev", "--http", "127.0.0.1:0")
		url := p.waitFor(t, urlRe, time.Minute)
		def, env := httpClient(t, url), httpClient(t, url)
		if res, er := envCall(t, env, "configure_environment", map[string]any{"type": "venv-uv", "packages": []any{"alpha"}}); res.IsError {
			t.Fatal(er.Message)
		}
		time.Sleep(2 * time.Second) // both zygotes warm
		var dd, de []time.Duration
		for i := 0; i < 200; i++ {
			for _, c := range []*client.Client{def, env} {
				start := time.Now()
				if res, ex := call(t, c, "execute_code", map[string]any{"code": "print(1)"}); res.IsError {
					t.Fatal(ex.Message)
				}
				if c == def {
					dd = append(dd, time.Since(start))
				} else {
					de = append(de, time.Since(start))
				}
			}
		}
		t.Logf("print(1) p50: default environment %.2f ms, cached uv environment %.2f ms (200 calls each, alternating)", p50(dd), p50(de))
	})
	t.Run("placement", func(t *testing.T) {
		common := []string{"--no-index", "--find-links", wh, "--managers", "uv,venv"}
		cl := startClusterArgs(t, [][]string{common, common})
		pkgs := [][]any{{"alpha"}, {"beta==1.0"}, {"beta==2.0"}, {"gamma"}, {"scikit-fake"},
			{"alpha", "beta==1.0"}, {"alpha", "beta==2.0"}, {"gamma", "scikit-fake"}, {"alpha", "scikit-fake"}, {"beta==1.0", "gamma"}}
		holder := map[int]string{}
		clients := map[int]*client.Client{}
		for i, p := range pkgs {
			c := httpClient(t, cl.mcpURL)
			res, er := envCall(t, c, "configure_environment", map[string]any{"type": "venv-uv", "packages": p})
			if res.IsError {
				t.Fatal(er.Message)
			}
			holder[i], clients[i] = er.WorkerID, c
		}
		hits, total := 0, 0
		perWorker := map[string]int{}
		for round := 0; round < 5; round++ {
			for i := range pkgs {
				_, ex := call(t, clients[i], "execute_code", map[string]any{"code": "print(1)"})
				total++
				perWorker[ex.WorkerID]++
				if ex.WorkerID == holder[i] {
					hits++
				}
			}
		}
		t.Logf("placement: %d of %d jobs (%.0f%%) ran on the worker holding their environment; builds per worker %v; jobs per worker %v",
			hits, total, 100*float64(hits)/float64(total), countValues(holder), perWorker)
	})
}

func p50(ds []time.Duration) float64 {
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

func countValues(m map[int]string) string {
	c := map[string]int{}
	for _, v := range m {
		c[v]++
	}
	return fmt.Sprint(c)
}
