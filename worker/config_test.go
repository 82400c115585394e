package worker

import (
	"strings"
	"testing"

	"github.com/codexec/codexec/worker/runner"
)

func TestConfigExecMode(t *testing.T) {
	t.Parallel()
	c := Config{DataDir: t.TempDir()}.WithDefaults()
	if c.ExecMode != ExecZygote || c.MaxZygotes != runner.DefaultMaxZygotes || c.ZygoteIdle != runner.DefaultZygoteIdle {
		t.Errorf("defaults: exec mode %q, max zygotes %d, idle %v", c.ExecMode, c.MaxZygotes, c.ZygoteIdle)
	}
	if err := c.validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	c.ExecMode = "fork"
	if err := c.validate(); err == nil || !strings.Contains(err.Error(), "exec mode") {
		t.Errorf("validate accepted exec mode %q: %v", c.ExecMode, err)
	}
	c.ExecMode = ExecSpawn
	if err := c.validate(); err != nil {
		t.Errorf("validate(spawn): %v", err)
	}
}

// Jobs that sleep or wait on I/O should not hold a CPU's place: the default
// runs ConcurrencyPerCPU jobs per CPU, no more than the host's memory holds
// at the default memory limit, never fewer than the CPUs.
func TestDefaultConcurrency(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	for _, tc := range []struct {
		cpus            int
		hostMem, jobMem int64
		want            int
	}{
		{2, 24 * gib, gib, 8},
		{2, 5 * gib, gib, 5},
		{4, 2 * gib, gib, 4},
		{2, 0, gib, 8},
		{2, 24 * gib, 0, 8},
		{0, 0, 0, 1},
	} {
		if got := defaultConcurrency(tc.cpus, tc.hostMem, tc.jobMem); got != tc.want {
			t.Errorf("defaultConcurrency(%d, %d GiB, %d GiB) = %d, want %d", tc.cpus, tc.hostMem/gib, tc.jobMem/gib, got, tc.want)
		}
	}
	if hostMemory() <= 0 {
		t.Error("hostMemory read nothing from /proc/meminfo")
	}
}
