package runner_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/codexec/codexec/worker/runner"
)

func ExampleChildEnv() {
	worker := []string{
		"PATH=/root/.pyenv/shims:/usr/bin",
		"LANG=en_US.UTF-8",
		"NATS_URL=nats://user:secret@nats:4222",
		"HTTPS_PROXY=http://proxy:3128",
	}
	env := runner.ChildEnv(worker, "/var/cache/codexec/default", "/srv/codexec/sessions/s1",
		[]string{"HTTPS_PROXY"}, map[string]string{"MPLBACKEND": "Agg"})
	for _, kv := range env {
		fmt.Println(kv)
	}
	// Output:
	// HOME=/srv/codexec/sessions/s1
	// HTTPS_PROXY=http://proxy:3128
	// LANG=en_US.UTF-8
	// MPLBACKEND=Agg
	// PATH=/var/cache/codexec/default/bin:/usr/local/bin:/usr/bin:/bin
	// PYTHONIOENCODING=utf-8
	// VIRTUAL_ENV=/var/cache/codexec/default
}

func ExampleRun() {
	sessionDir := "/srv/codexec/sessions/s1"
	venv := "/var/cache/codexec/default"
	out, err := runner.Run(context.Background(), runner.Spec{
		Python:      venv + "/bin/python",
		Script:      sessionDir + "/script.py",
		Dir:         sessionDir,
		Env:         runner.ChildEnv(os.Environ(), venv, sessionDir, nil, nil),
		Timeout:     30 * time.Second,
		OutputLimit: 64 << 10,
	})
	switch {
	case err != nil:
		fmt.Println("could not start:", err) // the system failed, not the code
	case out.TimedOut:
		fmt.Printf("timed out after %v\n", out.Duration)
	case out.Signal != "":
		fmt.Println("killed by signal:", out.Signal)
	default:
		fmt.Printf("exit code %d\n%s%s", out.ExitCode, out.Stdout, out.Stderr)
	}
}
