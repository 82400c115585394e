//go:build !linux

package runner

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// The worker runs on Linux; elsewhere the package builds, so that the rest of
// the tree does, but Run refuses to start anything it could not contain.

func supported() error {
	return fmt.Errorf("runner: running jobs is only supported on linux, not %s", runtime.GOOS)
}

func sysProcAttr() *syscall.SysProcAttr { return nil }

func waitExited(int) {}

func killGroup(int) {}

func exitStatus(ps *os.ProcessState) (int, string) { return ps.ExitCode(), "" }

func setRlimits(int, []Rlimit) error { return nil }

// NoCoreFiles is the limit that keeps a crashing job from dumping core;
// none here, where jobs do not run.
func NoCoreFiles() []Rlimit { return nil }
