package worker

import (
	"strings"
	"testing"

	"github.com/codexec/codexec/worker/limits"
)

func TestConfigLimitsAndSandbox(t *testing.T) {
	t.Parallel()
	c := Config{DataDir: t.TempDir()}.WithDefaults()
	if c.Limits != limits.Default || c.MaxLimits != limits.DefaultMax || c.Sandbox != SandboxAuto || c.JobNetwork != NetworkNone {
		t.Fatalf("defaults: limits %v, max %v, sandbox %q, network %q", c.Limits, c.MaxLimits, c.Sandbox, c.JobNetwork)
	}
	if err := c.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}

	// An operator's "none" survives WithDefaults when said explicitly.
	none := Config{DataDir: "/x", ExplicitLimits: true}.WithDefaults()
	if !none.Limits.IsZero() || !none.MaxLimits.IsZero() {
		t.Errorf("explicit none: %v, %v", none.Limits, none.MaxLimits)
	}
	// Only one Set given: the other is taken as given too.
	own := Config{DataDir: "/x", Limits: limits.Set{Procs: 10}}.WithDefaults()
	if own.Limits != (limits.Set{Procs: 10}) || !own.MaxLimits.IsZero() {
		t.Errorf("own limits: %v, %v", own.Limits, own.MaxLimits)
	}

	ok := func(mod func(*Config)) {
		t.Helper()
		c := Config{DataDir: "/x"}.WithDefaults()
		mod(&c)
		if err := c.validate(); err != nil {
			t.Errorf("validate: %v", err)
		}
	}
	bad := func(mod func(*Config), want ...string) {
		t.Helper()
		c := Config{DataDir: "/x"}.WithDefaults()
		mod(&c)
		err := c.validate()
		for _, w := range want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("validate: %v, want %q", err, w)
			}
		}
	}
	ok(func(c *Config) { c.Sandbox, c.JobNetwork = SandboxRequire, NetworkAllow })
	ok(func(c *Config) { c.Sandbox = SandboxOff })
	ok(func(c *Config) {
		c.SandboxReadOnly, c.SandboxDevices = []string{"/data", "/opt/models"}, []string{"/dev/nvidia0", "/dev/dri/renderD128"}
	})
	ok(func(c *Config) { c.Limits, c.MaxLimits = limits.Set{}, limits.Set{} })
	bad(func(c *Config) { c.Sandbox = "on" }, `invalid sandbox mode "on"`)
	bad(func(c *Config) { c.JobNetwork = "host" }, `invalid job network "host"`)
	bad(func(c *Config) { c.Limits.Memory = 9 << 30 }, "limits: default memory=9GiB is above the maximum memory=8GiB")
	bad(func(c *Config) { c.Limits.Disk = 0 }, "default disk=none")
	bad(func(c *Config) { c.SandboxReadOnly = []string{"data"} }, `read-only path "data" is not absolute`)
	ok(func(c *Config) { c.SeccompAllow = []string{"ptrace", "socket"} })
	bad(func(c *Config) { c.SeccompAllow = []string{"ptrace", "getpid"} }, `"getpid" is not a system call the filter refuses`)
	bad(func(c *Config) { c.SandboxDevices = []string{"/etc/shadow"} }, `device "/etc/shadow"`)
	bad(func(c *Config) { c.SandboxDevices = []string{"/dev/../etc"} }, `device "/dev/../etc"`)
	bad(func(c *Config) { c.SandboxDevices = []string{"nvidia0"} }, `device "nvidia0"`)
}
