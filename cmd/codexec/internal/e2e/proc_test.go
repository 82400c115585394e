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
	// SIGTERM reached the child too: it is gone, or a zombie, soon. (A
	// pid reused since then is not named sleep.)
	deadline := time.Now().Add(10 * time.Second)
	for {
		state := procState(m)
		if state == "" || state == "Z" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the stopped process is still running (state %s)", child, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procState is the state of process pid if it runs sleep, else "".
func procState(pid string) string {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || s[open+1:end] != "sleep" {
		return ""
	}
	if f := strings.Fields(s[end+1:]); len(f) > 0 {
		return f[0]
	}
	return ""
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
