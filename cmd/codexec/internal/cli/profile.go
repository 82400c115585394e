package cli

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// cpuProfileEnv names a file that receives a Go CPU profile of the whole
// command, from its start to its return: a debugging aid for measuring
// where a server's CPU goes under load (docs/performance.md), not a
// setting, so it is not among the flags.
const cpuProfileEnv = "CODEXEC_CPU_PROFILE"

// startCPUProfile starts the profile CODEXEC_CPU_PROFILE asks for and
// returns what stops it; without the variable it does nothing.
func startCPUProfile(stderr io.Writer) (stop func()) {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintf(stderr, "codexec: %s: %v\n", cpuProfileEnv, err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(stderr, "codexec: %s: %v\n", cpuProfileEnv, err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
