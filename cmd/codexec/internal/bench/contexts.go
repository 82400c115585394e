package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/mark3labs/mcp-go/client"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
)

// The contexts scenarios (-contexts): on one codexec dev over stdio, as
// deployed (zygote mode, in the sandbox unless -sandbox off), a call in a
// context (`x += 1; x`) and a stateless execute_code print(1), alternated
// call by call so that both see the same machine; then create_context (each
// context closed after it is measured, untimed).

// contextCell is the measured call in a context.
const contextCell = "x += 1; x"

func (b *bench) contextScenarios(ctx context.Context) error {
	mode := "zygote"
	if b.sandboxList[len(b.sandboxList)-1] {
		mode += "+sandbox" // as deployed
	}
	b.logf("contexts: codexec dev over stdio, exec mode %s", mode)
	c, p, err := b.startDev(ctx, "contexts-"+mode, mode)
	if err != nil {
		return err
	}
	defer p.Stop(stopGrace)
	if _, err := callTool(ctx, c, "create_context", map[string]any{"name": "bench"}); err != nil {
		return err
	}
	if _, err := callTool(ctx, c, "run_in_context", map[string]any{"context_id": "bench", "code": "x = 0"}); err != nil {
		return err
	}
	cell := map[string]any{"context_id": "bench", "code": contextCell}
	for range min(10, b.n) { // warm-up
		_, _ = callExecute(ctx, c, "print(1)")
		_, _ = callTool(ctx, c, "run_in_context", cell)
	}
	stateless := benchResult{Name: "execute_code print(1)", Topology: "dev", Mode: mode, Code: "print(1)", Concurrency: 1}
	inContext := benchResult{Name: "run_in_context " + contextCell, Topology: "dev", Mode: mode, Code: contextCell, Concurrency: 1}
	var sds, sruns, cds, cruns []time.Duration
	for range b.n {
		start := time.Now()
		if run, err := callExecute(ctx, c, "print(1)"); err != nil {
			stateless.Errors++
		} else {
			sds, sruns = append(sds, time.Since(start)), append(sruns, run)
		}
		start = time.Now()
		if run, err := callTool(ctx, c, "run_in_context", cell); err != nil {
			inContext.Errors++
		} else {
			cds, cruns = append(cds, time.Since(start)), append(cruns, run)
		}
	}
	b.add(stateless, sds, sruns, 0)
	b.add(inContext, cds, cruns, 0)

	create := benchResult{Name: "create_context", Topology: "dev", Mode: mode, Concurrency: 1}
	var ds, runs []time.Duration
	for i := range b.nSlow {
		name := fmt.Sprintf("c%d", i)
		start := time.Now()
		run, err := callTool(ctx, c, "create_context", map[string]any{"name": name})
		if err != nil {
			create.Errors++
			continue
		}
		ds, runs = append(ds, time.Since(start)), append(runs, run)
		if _, err := callTool(ctx, c, "close_context", map[string]any{"context_id": name}); err != nil {
			return err
		}
	}
	b.add(create, ds, runs, 0)
	return nil
}

// callTool calls tool and returns the duration_ms of its result (the
// worker's own measure), or why it failed.
func callTool(ctx context.Context, c *client.Client, tool string, args map[string]any) (time.Duration, error) {
	res, err := e2e.Call(ctx, c, tool, args, 2*time.Minute)
	if err != nil {
		return 0, err
	}
	var sc struct {
		DurationMS float64 `json:"duration_ms"`
		Message    string  `json:"message"`
	}
	_ = e2e.Decode(res, &sc)
	if res.IsError {
		return 0, fmt.Errorf("%s failed: %s", tool, sc.Message)
	}
	return time.Duration(sc.DurationMS * float64(time.Millisecond)), nil
}
