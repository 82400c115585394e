//go:build !linux

package limits

import "github.com/codexec/codexec/worker/runner"

// Rlimits is empty where jobs do not run (the worker runs on Linux; see
// package runner).
func (s Set) Rlimits(cgroupMemory bool) []runner.Rlimit { return nil }
