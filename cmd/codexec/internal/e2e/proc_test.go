package e2e

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProcWaitForAndStop(t *testing.T) {
	t.Parallel()
	// The shell starts a child in its group and prints its pid: Stop must
	// end the child too.
	p, err := Command{Path: "/bin/sh", Args: []string{"-c", "sleep 300 & echo child=$!; wait"}}.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := p.WaitFor(ctx, regexp.MustCompile(`child=(\d+)`))
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(m)
	if err != nil {
		t.Fatalf("group %q: %v", m, err)
	}
	p.Stop(5 * time.Second)
	p.Stop(5 * time.Second) // idempotent
	select {
	case <-p.Exited():
	default:
		t.Fatal("Stop returned before the process exited")
	}
	// The child is gone, or a zombie on its way out.
	if stat, err := os.ReadFile("/proc/" + m + "/stat"); err == nil {
		s := string(stat)
		if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) > 0 && f[0] != "Z" {
			t.Errorf("child %d of the stopped process is still running (state %s)", child, f[0])
		}
	}
}

func TestWaitForExitedProcess(t *testing.T) {
	t.Parallel()
	p, err := Command{Path: "/bin/sh", Args: []string{"-c", "echo bye"}}.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.WaitFor(ctx, regexp.MustCompile(`never printed`)); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("WaitFor on an exited process: %v", err)
	}
	// What it printed before exiting is still found.
	if m, err := p.WaitFor(ctx, regexp.MustCompile(`by(e)`)); err != nil || m != "e" {
		t.Fatalf("WaitFor = %q, %v", m, err)
	}
}

func TestCleanEnv(t *testing.T) {
	t.Setenv("CODEXEC_E2E_CLEANENV_PROBE", "x")
	t.Setenv("CODE_STORAGE_DIR", "/nowhere")
	env := CleanEnv("A=1")
	for _, kv := range env {
		if strings.HasPrefix(kv, "CODEXEC_") || strings.HasPrefix(kv, "CODE_STORAGE_DIR=") {
			t.Errorf("CleanEnv kept %s", kv)
		}
	}
	if env[len(env)-1] != "A=1" {
		t.Errorf("extra not last: %v", env[len(env)-1])
	}
}
