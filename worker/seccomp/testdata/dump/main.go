// Command dump writes the jobs' system-call filter (seccomp.Program with no
// allow list) to stdout, for install_bench.py:
//
//	go run ./worker/seccomp/testdata/dump > /tmp/filter.bin
package main

import (
	"fmt"
	"os"

	"github.com/codexec/codexec/worker/seccomp"
)

func main() {
	prog, err := seccomp.Program(nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "%d instructions\n", len(prog)/8)
	os.Stdout.Write(prog)
}
