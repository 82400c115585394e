package runner

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
)

// ContextSource is the Python code of a context's interpreter (context.py):
// the worker writes it where a job's script goes and starts an Interp with
// it as the Spec's Script. It serves cells on the socket that is its fd 0.
//
//go:embed context.py
var ContextSource []byte

// ErrInterpEnded is wrapped by the errors of an Interp whose process is gone:
// killed after it ignored an interrupt, killed by a limit, exited (a cell
// called os._exit), or lost with its zygote. Its variables are gone with it.
var ErrInterpEnded = errors.New("runner: the context's interpreter ended")

// DefaultInterruptGrace is how long a cell may go on after its timeout's
// KeyboardInterrupt before its interpreter is killed.
const DefaultInterruptGrace = 2 * time.Second

// CellOutcome is what one cell of an Interp did. Outcome holds its output
// (what the interpreter wrote to stdout and stderr during the call, capped
// as a job's), ExitCode 0 when the cell ran to its end and 1 when it raised,
// TimedOut when its timeout passed, and Duration.
type CellOutcome struct {
	Outcome
	// Error is "Type: message" of the exception that ended the cell.
	Error string
	// Interrupted says KeyboardInterrupt ended the cell: its timeout, a
	// cancellation, or the cell's own raise.
	Interrupted bool
}

// CellSpec is one call in an Interp.
type CellSpec struct {
	Code string
	// Timeout interrupts the cell (KeyboardInterrupt) when it passes; Grace
	// later the interpreter is killed if the cell still runs. Zero: no
	// timeout; Grace zero: DefaultInterruptGrace.
	Timeout, Grace time.Duration
	// OutputLimit caps stdout and stderr, each, as Spec.OutputLimit.
	OutputLimit int64
}

// StartInterp starts a context's interpreter for s in s's zygote, waiting
// for that zygote to be ready (up to its start timeout, or until ctx ends):
// a context is never started cold. s.Script must be the context's code
// (ContextSource, written to a file). The zygote counts as busy for as long
// as the interpreter lives (the pool does not stop it), and the Interp's
// Close ends both.
func (p *Pool) StartInterp(ctx context.Context, s Spec) (*Interp, error) {
	if err := p.Warm(ctx, s); err != nil {
		return nil, fmt.Errorf("runner: no warm interpreter for the context: %w", err)
	}
	e := p.acquire(s)
	if e == nil {
		return nil, errors.New("runner: no warm interpreter for the context (the pool is full or closing)")
	}
	it, err := e.z.StartInterp(ctx, s)
	if err != nil {
		p.release(e, err)
		return nil, err
	}
	it.onClose = func() { p.release(e, nil) }
	return it, nil
}
