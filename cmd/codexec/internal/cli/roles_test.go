package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/frontend"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/frontend/quota"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker"
	"github.com/codexec/codexec/worker/limits"
)

// parseWorkerFlags registers the worker flags, parses args and returns the
// worker configuration they give.
func parseWorkerFlags(t *testing.T, args ...string) (worker.Config, error) {
	t.Helper()
	f := newFlags("worker", io.Discard)
	var ff frontendFlags
	var wf workerFlags
	wf.register(f)
	if err := f.Parse(args); err != nil {
		return worker.Config{}, err
	}
	if err := wf.check(); err != nil {
		return worker.Config{}, err
	}
	return wf.config("/data", "default", &ff, slog.New(slog.DiscardHandler)), nil
}

func TestWorkerIsolationFlags(t *testing.T) {
	t.Parallel()
	c, err := parseWorkerFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits != limits.Default || c.MaxLimits != limits.DefaultMax || !c.ExplicitLimits ||
		c.Sandbox != worker.SandboxAuto || c.JobNetwork != worker.NetworkNone || c.SandboxReadOnly != nil || c.SandboxDevices != nil || c.SeccompAllow != nil {
		t.Errorf("defaults: %+v", c)
	}

	c, err = parseWorkerFlags(t, "--limits", "memory=2GiB,disk=none", "--max-limits", "none",
		"--sandbox", "require", "--job-network", "allow", "--sandbox-ro", "/data/sets, /opt/models", "--sandbox-dev", "/dev/nvidia0,/dev/nvidiactl",
		"--seccomp-allow", "ptrace, personality")
	if err != nil {
		t.Fatal(err)
	}
	want := limits.Default
	want.Memory, want.Disk = 2<<30, 0
	if c.Limits != want || !c.MaxLimits.IsZero() || c.Sandbox != worker.SandboxRequire || c.JobNetwork != worker.NetworkAllow ||
		!slices.Equal(c.SandboxReadOnly, []string{"/data/sets", "/opt/models"}) || !slices.Equal(c.SandboxDevices, []string{"/dev/nvidia0", "/dev/nvidiactl"}) ||
		!slices.Equal(c.SeccompAllow, []string{"ptrace", "personality"}) {
		t.Errorf("from flags: %+v", c)
	}
	// "none" for both stays none: the worker does not put its defaults back.
	c, err = parseWorkerFlags(t, "--limits", "none", "--max-limits", "none")
	if err != nil {
		t.Fatal(err)
	}
	if c = c.WithDefaults(); !c.Limits.IsZero() || !c.MaxLimits.IsZero() {
		t.Errorf("none: %v, %v", c.Limits, c.MaxLimits)
	}
}

func TestWorkerIsolationEnv(t *testing.T) {
	t.Setenv("CODEXEC_LIMITS", "cpu=5m")
	t.Setenv("CODEXEC_MAX_LIMITS", "procs=none")
	t.Setenv("CODEXEC_SANDBOX", "off")
	t.Setenv("CODEXEC_JOB_NETWORK", "allow")
	t.Setenv("CODEXEC_SANDBOX_RO", "/srv")
	t.Setenv("CODEXEC_SANDBOX_DEV", "/dev/fuse")
	t.Setenv("CODEXEC_SECCOMP_ALLOW", "ptrace")
	c, err := parseWorkerFlags(t)
	if err != nil {
		t.Fatal(err)
	}
	wantLimits, wantMax := limits.Default, limits.DefaultMax
	wantLimits.CPU, wantMax.Procs = 5*time.Minute, 0
	if c.Limits != wantLimits || c.MaxLimits != wantMax || c.Sandbox != worker.SandboxOff || c.JobNetwork != worker.NetworkAllow ||
		!slices.Equal(c.SandboxReadOnly, []string{"/srv"}) || !slices.Equal(c.SandboxDevices, []string{"/dev/fuse"}) || !slices.Equal(c.SeccompAllow, []string{"ptrace"}) {
		t.Errorf("from the environment: %+v", c)
	}
	// The flag wins, and reads over the built-in defaults, not over the
	// variable.
	c, err = parseWorkerFlags(t, "--limits", "memory=2GiB", "--sandbox", "auto")
	if err != nil {
		t.Fatal(err)
	}
	wantLimits = limits.Default
	wantLimits.Memory = 2 << 30
	if c.Limits != wantLimits || c.Sandbox != worker.SandboxAuto {
		t.Errorf("flag over variable: %v, sandbox %q", c.Limits, c.Sandbox)
	}
}

func TestWorkerIsolationEnvErrors(t *testing.T) {
	for env, want := range map[string]string{
		"CODEXEC_LIMITS":      "$CODEXEC_LIMITS: unknown limit \"ram\"",
		"CODEXEC_MAX_LIMITS":  "$CODEXEC_MAX_LIMITS: unknown limit \"ram\"",
		"CODEXEC_SANDBOX":     "$CODEXEC_SANDBOX: \"ram=1\" is not one of auto, require, off",
		"CODEXEC_JOB_NETWORK": "$CODEXEC_JOB_NETWORK: \"ram=1\" is not one of none, allow",
	} {
		t.Run(env, func(t *testing.T) {
			t.Setenv(env, "ram=1")
			_, err := parseWorkerFlags(t)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s=ram=1: %v, want %q", env, err, want)
			}
		})
	}
}

// Bad isolation flags stop worker and dev before anything starts, with a
// usage error that names the flag.
func TestWorkerIsolationFlagErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--limits", "mem=1GiB"}, []string{`invalid value "mem=1GiB" for flag -limits`, `unknown limit "mem"`, "memory, cpu"}},
		{[]string{"--limits", "memory=0"}, []string{"flag -limits", "memory=0: must be more than zero"}},
		{[]string{"--max-limits", "cpu=forever"}, []string{"flag -max-limits", "cpu=forever: not a duration"}},
		{[]string{"--sandbox", "on"}, []string{`invalid value "on" for flag -sandbox`, "auto, require, off"}},
		{[]string{"--job-network", "host"}, []string{`invalid value "host" for flag -job-network`, "none, allow"}},
		{[]string{"--limits", "memory=9GiB"}, []string{"--limits is not within --max-limits", "default memory=9GiB is above the maximum memory=8GiB"}},
		{[]string{"--limits", "procs=none"}, []string{"--limits is not within --max-limits", "default procs=none"}},
		{[]string{"--max-limits", "nofile=512"}, []string{"default nofile=1024 is above the maximum nofile=512"}},
	}
	for _, cmd := range []string{"worker", "dev"} {
		for _, tc := range cases {
			var stdout, stderr bytes.Buffer
			args := append([]string{cmd, "--data-dir", t.TempDir()}, tc.args...)
			rc := Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr)
			if rc != 2 {
				t.Errorf("%v: exit code %d, want 2; stderr %s", args, rc, stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("%v: stderr %q lacks %q", args, stderr.String(), w)
				}
			}
		}
	}
}

// The byte flags read sizes as --limits does (one parser, internal/units):
// "1MB" is accepted by both, and is the same number of bytes.
func TestSizeFlagsReadLikeLimits(t *testing.T) {
	t.Parallel()
	f := newFlags("dev", io.Discard)
	var ff frontendFlags
	var wf workerFlags
	ff.register(f, "")
	wf.register(f)
	if err := f.Parse([]string{"--max-code", "1MB", "--output-limit", "512kib", "--max-file", "2m", "--env-budget", "1 TiB",
		"--limits", "memory=1MB"}); err != nil {
		t.Fatal(err)
	}
	if ff.maxCode != 1e6 || ff.outputLimit != 512<<10 || ff.maxFile != 2<<20 || wf.envBudget != 1<<40 {
		t.Errorf("sizes: max-code %d, output-limit %d, max-file %d, env-budget %d", ff.maxCode, ff.outputLimit, ff.maxFile, wf.envBudget)
	}
	if wf.limits.Memory != ff.maxCode {
		t.Errorf("--limits memory=1MB is %d bytes, --max-code 1MB %d", wf.limits.Memory, ff.maxCode)
	}
}

// A bad command line of bench exits with status 2, as the other commands'.
func TestBenchUsageExitCode(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	if rc := Main(context.Background(), []string{"bench", "-n", "0"}, strings.NewReader(""), &bytes.Buffer{}, &stderr); rc != 2 {
		t.Errorf("bench -n 0: exit code %d, want 2; stderr %s", rc, stderr.String())
	}
	if !strings.Contains(stderr.String(), "codexec bench: -n, -n-slow and -concurrency must be positive") {
		t.Errorf("bench -n 0: stderr %q", stderr.String())
	}
}

// Frontends and workers default to the same largest job timeout, and so do
// the flags of every command, so a cluster that sets no --max-timeout
// agrees with itself.
func TestRolesAgreeOnMaxTimeout(t *testing.T) {
	t.Parallel()
	fe := frontend.Config{}.WithDefaults().MaxTimeout
	w := worker.Config{DataDir: t.TempDir()}.WithDefaults().MaxTimeout
	if fe != wire.DefaultMaxTimeout || w != wire.DefaultMaxTimeout {
		t.Errorf("default max timeout: frontend %v, worker %v, want %v", fe, w, wire.DefaultMaxTimeout)
	}
	for _, cmd := range []string{"dev", "frontend", "worker"} {
		var stderr bytes.Buffer
		Main(context.Background(), []string{cmd, "-h"}, strings.NewReader(""), &bytes.Buffer{}, &stderr)
		if want := "($CODEXEC_MAX_TIMEOUT) (default " + wire.DefaultMaxTimeout.String() + ")"; !strings.Contains(stderr.String(), want) {
			t.Errorf("codexec %s -h lacks %q:\n%s", cmd, want, stderr.String())
		}
	}
}

// A frontend whose callers authenticate (tenants sharing it) says at start
// which storage quotas have no default limit; one without credentials, or
// with every storage quota set, says nothing.
func TestWarnUnboundedTenants(t *testing.T) {
	dir := t.TempDir()
	_, line, err := auth.NewToken("acme", "me")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokens")
	if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := auth.LoadTokens(path, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	table := func(flag string) *quota.Table {
		l, err := quota.ParseLimits(flag)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := quota.NewTable(l, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	for _, c := range []struct {
		name   string
		access auth.Policy
		quotas *quota.Table
		want   string
	}{
		{"no credentials", auth.Policy{}, nil, ""},
		{"no quotas", auth.Policy{Authenticator: tokens}, nil, `quotas="[code_file_bytes workspaces working_dir_bytes result_bytes]"`},
		{"some", auth.Policy{Authenticator: tokens}, table("jobs=4,code_file_bytes=1GiB"), `quotas="[workspaces working_dir_bytes result_bytes]"`},
		{"all", auth.Policy{Authenticator: tokens}, table("code_file_bytes=1GiB,workspaces=10,working_dir_bytes=1GiB,result_bytes=1GiB"), ""},
	} {
		var buf bytes.Buffer
		warnUnboundedTenants(c.access, c.quotas, slog.New(slog.NewTextHandler(&buf, nil)))
		if got := buf.String(); (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: logged %q, want %q", c.name, got, c.want)
		}
	}
}
