package runner

import "context"

// Executor runs one job's Spec and reports its Outcome: how the job's
// interpreter comes to life (Spawn, a Zygote, a Pool of them, or Fresh
// sandboxed interpreters) is the Executor's business; what the job sees
// and what its Outcome means are the same for all, as Run documents them.
// The worker chooses one Executor when it starts.
type Executor interface {
	Run(ctx context.Context, s Spec) (Outcome, error)
}

// Spawn is the Executor that starts a fresh interpreter per job: Run.
type Spawn struct{}

// Run runs s with the package-level Run.
func (Spawn) Run(ctx context.Context, s Spec) (Outcome, error) { return Run(ctx, s) }

// Every way of running a job is an Executor.
var (
	_ Executor = Spawn{}
	_ Executor = (*Zygote)(nil)
	_ Executor = (*Pool)(nil)
	_ Executor = (*Fresh)(nil)
)
