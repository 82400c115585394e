//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// python is the real interpreter behind python3 on PATH. Shims (pyenv) are
// resolved once here so that every run does not pay for them.
var python = sync.OnceValues(func() (string, error) {
	p, err := exec.LookPath("python3")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(p, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return strings.TrimSpace(string(out)), nil
})

type testBundle struct {
	python string
	dir    string
}

func setup(tb testing.TB) *testBundle {
	tb.Helper()
	p, err := python()
	if err != nil {
		tb.Skipf("no python3 to run jobs with: %v", err)
	}
	return &testBundle{python: p, dir: tb.TempDir()}
}

// spec writes src as the job's script and returns a Spec that runs it with a
// minimal environment and a generous safety timeout.
func (b *testBundle) spec(tb testing.TB, src string) Spec {
	tb.Helper()
	script := filepath.Join(b.dir, "job.py")
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		tb.Fatal(err)
	}
	return Spec{
		Python:  b.python,
		Script:  script,
		Dir:     b.dir,
		Env:     ChildEnv(nil, "", b.dir, nil, nil),
		Timeout: time.Minute,
	}
}

func run(tb testing.TB, s Spec) Outcome {
	tb.Helper()
	return runWith(tb, Spawn{}, s)
}

// The child sees exactly Spec.Env: nothing of the worker's own environment.
func TestRunEnvironment(t *testing.T) {
	t.Parallel()
	t.Run("ChildEnv", func(t *testing.T) {
		t.Parallel()
		base := []string{
			"PATH=/worker/bin", "HOME=/root", "LANG=en_US.UTF-8",
			"NATS_URL=nats://secret@nats:4222", "CODEXEC_REDIS_URL=redis://:pw@redis:6379",
			"AWS_SECRET_ACCESS_KEY=hunter2", "HF_TOKEN=tok",
		}
		env := ChildEnv(base, "/opt/venv", "/home/job", []string{"HF_TOKEN"}, map[string]string{"MPLBACKEND": "Agg"})
		got := childEnviron(t, env)
		for _, name := range []string{"NATS_URL", "CODEXEC_REDIS_URL", "AWS_SECRET_ACCESS_KEY"} {
			if v, ok := got[name]; ok {
				t.Errorf("%s=%s leaked into the job", name, v)
			}
		}
		want := map[string]string{
			"PATH": "/opt/venv/bin:" + SystemPath, "HOME": "/home/job", "VIRTUAL_ENV": "/opt/venv",
			"LANG": "en_US.UTF-8", "PYTHONIOENCODING": "utf-8", "HF_TOKEN": "tok", "MPLBACKEND": "Agg",
		}
		for name, v := range want {
			if got[name] != v {
				t.Errorf("%s = %q, want %q", name, got[name], v)
			}
		}
	})
	t.Run("nil", func(t *testing.T) {
		t.Parallel()
		got := childEnviron(t, nil)
		// Python may set LC_CTYPE itself (PEP 538); nothing else may appear.
		delete(got, "LC_CTYPE")
		if len(got) != 0 {
			t.Errorf("a nil Spec.Env gave the child %v; want an empty environment", got)
		}
	})
}

// childEnviron runs a job with environment env and returns the environment
// the job saw.
func childEnviron(t *testing.T, env []string) map[string]string {
	t.Helper()
	b := setup(t)
	s := b.spec(t, "import json, os\nprint(json.dumps(dict(os.environ)))\n")
	s.Env = env
	out := run(t, s)
	var got map[string]string
	if err := json.Unmarshal(out.Stdout, &got); err != nil {
		t.Fatalf("child printed %q (stderr %q): %v", out.Stdout, out.Stderr, err)
	}
	return got
}

func TestRunStartErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := b.spec(t, "print(1)\n")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name  string
		ctx   context.Context
		spec  func(s *Spec)
		isErr error
	}{
		{name: "missing interpreter", spec: func(s *Spec) { s.Python = filepath.Join(b.dir, "no-such-python") }, isErr: os.ErrNotExist},
		{name: "relative interpreter", spec: func(s *Spec) { s.Python = "python3" }},
		{name: "empty interpreter", spec: func(s *Spec) { s.Python = "" }},
		{name: "relative script", spec: func(s *Spec) { s.Script = "job.py" }},
		{name: "missing dir", spec: func(s *Spec) { s.Dir = filepath.Join(b.dir, "gone") }},
		{name: "cancelled context", ctx: cancelled, spec: func(*Spec) {}, isErr: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := good
			tt.spec(&s)
			ctx := tt.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			out, err := Run(ctx, s)
			if err == nil {
				t.Fatalf("Run started %+v: %+v", s, out)
			}
			if tt.isErr != nil && !errors.Is(err, tt.isErr) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.isErr)
			}
		})
	}
}

func BenchmarkRunPrint1(b *testing.B) {
	tb := setup(b)
	s := tb.spec(b, "print(1)\n")
	ctx := context.Background()
	for b.Loop() {
		out, err := Run(ctx, s)
		if err != nil || out.ExitCode != 0 || string(out.Stdout) != "1\n" {
			b.Fatalf("Run: %+v, %v", out, err)
		}
	}
}
