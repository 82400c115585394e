package limits_test

import (
	"fmt"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/limits"
)

func ExampleParseOver() {
	// The operator's --limits: the defaults, with two keys changed.
	defaults, err := limits.ParseOver(limits.Default, "memory=2GiB,disk=none")
	if err != nil {
		panic(err)
	}
	fmt.Println(defaults)
	// Output: memory=2GiB,cpu=10m,procs=256,fsize=1GiB,disk=none,nofile=1024
}

func ExampleResolve() {
	// A call's limits parameter, against the pool's maximums.
	job, err := limits.Resolve(limits.Default, limits.DefaultMax, &wire.Limits{MemoryMB: 4096, CPUSeconds: 30})
	fmt.Println(job, err)
	_, err = limits.Resolve(limits.Default, limits.DefaultMax, &wire.Limits{MemoryMB: 9000})
	fmt.Println(err)
	// Output:
	// memory=4GiB,cpu=30s,procs=256,fsize=1GiB,disk=2GiB,nofile=1024 <nil>
	// memory_mb 9000 is above this pool's maximum of 8192
}
