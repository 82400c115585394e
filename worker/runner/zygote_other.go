//go:build !linux

package runner

import "context"

// Zygote is a warm interpreter that forks a child per job; only Linux has
// them (StartZygote fails elsewhere, and a Pool falls back to Run).
type Zygote struct{}

// StartZygote fails: zygotes need Linux.
func StartZygote(context.Context, ZygoteConfig) (*Zygote, error) { return nil, supported() }

// Run fails: zygotes need Linux.
func (z *Zygote) Run(context.Context, Spec) (Outcome, error) { return Outcome{}, ErrNotStarted }

// Info describes the zygote.
func (z *Zygote) Info() ZygoteInfo { return ZygoteInfo{} }

// Done is closed once the zygote has exited.
func (z *Zygote) Done() <-chan struct{} { c := make(chan struct{}); close(c); return c }

// Err says why the zygote is gone.
func (z *Zygote) Err() error { return supported() }

// RSS returns the zygote's resident set size in bytes.
func (z *Zygote) RSS() int64 { return 0 }

// Jobs returns how many jobs the zygote has run.
func (z *Zygote) Jobs() uint64 { return 0 }

// Close stops the zygote.
func (z *Zygote) Close() error { return nil }

// ProcessRSS returns the resident set size of process pid in bytes.
func ProcessRSS(int) int64 { return 0 }
