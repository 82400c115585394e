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
