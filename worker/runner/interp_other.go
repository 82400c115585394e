//go:build !linux

package runner

import "context"

// Interp is a context's interpreter; only Linux has them.
type Interp struct{ onClose func() }

// StartInterp fails: contexts need Linux.
func (z *Zygote) StartInterp(context.Context, Spec) (*Interp, error) { return nil, supported() }

// Exec fails: contexts need Linux.
func (it *Interp) Exec(context.Context, CellSpec) (CellOutcome, error) {
	return CellOutcome{}, ErrInterpEnded
}

// Ended is closed once the interpreter is gone.
func (it *Interp) Ended() <-chan struct{} { c := make(chan struct{}); close(c); return c }

// Close releases the interpreter.
func (it *Interp) Close() {}
