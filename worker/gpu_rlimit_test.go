package worker

import (
	"testing"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"golang.org/x/sys/unix"
)

// Without a cgroup, a job's memory limit is the address space of each of
// its processes (RLIMIT_AS), except a GPU job's: CUDA reserves address
// space far beyond the memory it uses, and on an H200 a job under an 8 GiB
// RLIMIT_AS failed at CUDA's first call ("out of memory"), one under the
// default 1 GiB at `import torch`.
func TestGPUJobsGetNoAddressSpaceLimit(t *testing.T) {
	w := &Worker{}
	set := limits.Set{Memory: 1 << 30}
	hasAS := func(job *wire.Job) bool {
		var spec runner.Spec
		if _, err := w.prepareLimits(job, set, &spec, t.TempDir(), t.TempDir(), 0, nil); err != nil {
			t.Fatal(err)
		}
		for _, r := range spec.Rlimits {
			if r.Resource == unix.RLIMIT_AS {
				return true
			}
		}
		return false
	}
	if !hasAS(&wire.Job{ID: "cpu", Scope: "s"}) {
		t.Error("a job without GPUs and without a cgroup has no address-space limit")
	}
	if hasAS(&wire.Job{ID: "gpu", Scope: "s", GPU: &envspec.GPURequest{Count: 1}}) {
		t.Error("a GPU job got an address-space limit, under which CUDA cannot start")
	}
}
