package runner

import (
	"context"
	"testing"

	"github.com/codexec/codexec/worker/sandbox"
)

// BenchmarkSandboxedZygoteStart is what a sandboxed zygote (no preloads)
// takes to start and be ready, with each launcher side by side: the
// launcher's sandbox plus an interpreter's start, what a spawn-mode job
// waits for when no spare is ready.
//
//	go test -run '^$' -bench SandboxedZygoteStart -count 6 ./worker/runner
func BenchmarkSandboxedZygoteStart(b *testing.B) {
	l := newSandboxLayout(b)
	for _, launcher := range []string{sandbox.LauncherBuiltin, sandbox.LauncherBwrap} {
		box, err := sandbox.Probe(context.Background(), sandbox.Config{Launcher: launcher})
		if err != nil {
			b.Logf("%s: %v", launcher, err)
			continue
		}
		cfg := *l.cfg
		cfg.Box = box
		b.Run(launcher, func(b *testing.B) {
			for b.Loop() {
				z, err := StartZygote(context.Background(), ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Sandbox: &cfg})
				if err != nil {
					b.Fatal(err)
				}
				z.Close()
			}
		})
	}
}
