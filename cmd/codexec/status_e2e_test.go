package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	clusterstatus "github.com/codexec/codexec/cmd/codexec/internal/status"
)

// statusJSON runs `codexec status --json` against the cluster and decodes
// its snapshot.
func (cl *cluster) statusJSON(t *testing.T, args ...string) clusterstatus.Snapshot {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"status", "--json", "--interval", "200ms"}, args...)...)
	cmd.Env = cl.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("codexec status --json: %v\n%s", err, stderr.String())
	}
	var snap clusterstatus.Snapshot
	if err := json.Unmarshal(out, &snap); err != nil {
		t.Fatalf("codexec status --json wrote %q: %v", out, err)
	}
	return snap
}

// statusUntil runs `codexec status --json` until ok holds of its snapshot,
// failing the test after within.
func (cl *cluster) statusUntil(t *testing.T, within time.Duration, what string, ok func(clusterstatus.Snapshot) bool) clusterstatus.Snapshot {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		snap := cl.statusJSON(t)
		if ok(snap) {
			return snap
		}
		if time.Now().After(deadline) {
			out, _ := json.MarshalIndent(snap, "", "  ")
			t.Fatalf("codexec status never showed %s within %s; last:\n%s", what, within, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func workerNamed(s clusterstatus.Snapshot, id string) (clusterstatus.Worker, bool) {
	for _, w := range s.Workers {
		if w.ID == id {
			return w, true
		}
	}
	return clusterstatus.Worker{}, false
}

func defaultPool(s clusterstatus.Snapshot) clusterstatus.Pool {
	for _, p := range s.Pools {
		if p.Name == "default" {
			return p
		}
	}
	return clusterstatus.Pool{}
}

// codexec status against a real cluster (nats-server, redis-server, a
// frontend, two workers): the workers with their labels, warm interpreters
// and environments; jobs waiting in the queue and handed out while both
// workers are busy; the jobs run counted.
func TestStatusShowsCluster(t *testing.T) {
	t.Parallel()
	venv := venvFor(t)
	cl := startClusterArgs(t, [][]string{{"--labels", "zone=a", "--existing-envs", venv}, {"--labels", "zone=b"}})

	snap := cl.statusUntil(t, 2*time.Minute, "two workers, each with a warm interpreter", func(s clusterstatus.Snapshot) bool {
		w1, ok1 := workerNamed(s, "w1")
		w2, ok2 := workerNamed(s, "w2")
		return ok1 && ok2 && w1.Warm >= 1 && w2.Warm >= 1
	})
	w1, _ := workerNamed(snap, "w1")
	w2, _ := workerNamed(snap, "w2")
	if w1.Pool != "default" || w1.Labels["zone"] != "a" || w2.Labels["zone"] != "b" || w1.Concurrency != 1 || w1.StartedAt.IsZero() {
		t.Errorf("workers: %+v, %+v", w1, w2)
	}
	if len(w1.Envs) != 0 || len(w2.Envs) != 0 {
		t.Errorf("environments held before any session chose one: w1 %v, w2 %v", w1.Envs, w2.Envs)
	}
	if p := defaultPool(snap); p.Workers != 2 || p.Slots != 2 || p.Queued != 0 || p.InFlight != 0 {
		t.Errorf("idle pool: %+v", p)
	}

	// A session that chooses w1's existing venv runs there, and w1 then
	// holds that environment.
	c := httpClient(t, cl.mcpURL)
	if res, _ := callAs[map[string]any](t, c, "configure_environment", map[string]any{"type": "venv", "venv_path": venv}); res.IsError {
		t.Fatalf("configure_environment: %s", text(res))
	}
	if res, er := call(t, c, "execute_code", map[string]any{"code": "print(1)"}); res.IsError || er.WorkerID != "w1" {
		t.Fatalf("isError=%v %+v", res.IsError, er)
	}
	cl.statusUntil(t, time.Minute, "w1 holding the environment", func(s clusterstatus.Snapshot) bool {
		w1, _ := workerNamed(s, "w1")
		w2, _ := workerNamed(s, "w2")
		return len(w1.Envs) == 1 && len(w2.Envs) == 0
	})

	// Four sleeping jobs from two sessions (each session's share of the
	// queue is about the pool's slots): two run, two wait in the queue.
	var wg sync.WaitGroup
	for range 2 {
		c := httpClient(t, cl.mcpURL)
		for range 2 {
			wg.Go(func() {
				res, er := call(t, c, "execute_code", map[string]any{"code": "import time; time.sleep(4); print('slept')"})
				if res.IsError || er.Stdout != "slept\n" {
					t.Errorf("isError=%v %+v", res.IsError, er)
				}
			})
		}
	}
	cl.statusUntil(t, time.Minute, "two jobs handed out and jobs waiting in the queue", func(s clusterstatus.Snapshot) bool {
		p := defaultPool(s)
		return p.InFlight == 2 && p.Queued >= 1 && p.Load == 2
	})
	wg.Wait()
	done := cl.statusUntil(t, time.Minute, "the queue drained and four jobs delivered", func(s clusterstatus.Snapshot) bool {
		p := defaultPool(s)
		return p.Queued == 0 && p.InFlight == 0 && p.Delivered >= 5
	})
	if done.Published < 5 || defaultPool(done).JobsPerSec == nil {
		t.Errorf("published %d, jobs/s %v", done.Published, defaultPool(done).JobsPerSec)
	}

	// Not a terminal: tables, no escape sequences.
	cmd := exec.Command(os.Args[0], "status", "--interval", "100ms")
	cmd.Env = cl.env
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("codexec status:\n%s", out)
	if bytes.ContainsRune(out, 0x1b) || !bytes.Contains(out, []byte("WORKER")) || !regexp.MustCompile(`(?m)^w1\s+default\s`).Match(out) {
		t.Errorf("plain status:\n%s", out)
	}
}

// ptyScreen collects what a process writes to its pseudo-terminal.
type ptyScreen struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *ptyScreen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *ptyScreen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// lastFrame is the last complete frame drawn: from the last cursor-home to
// the clear-below that ends it, as plain lines.
func (s *ptyScreen) lastFrame() string {
	out := s.String()
	end := strings.LastIndex(out, "\x1b[J")
	if end < 0 {
		return ""
	}
	start := strings.LastIndex(out[:end], "\x1b[H")
	if start < 0 {
		return ""
	}
	frame := out[start+len("\x1b[H") : end]
	return strings.NewReplacer("\x1b[K", "", "\r", "").Replace(frame)
}

func (s *ptyScreen) waitFrame(t *testing.T, within time.Duration, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		f := s.lastFrame()
		if ok(f) {
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("the terminal never showed %s within %s; last frame:\n%s", what, within, f)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var poolRow = regexp.MustCompile(`(?m)^default\s+(\d+)\s+(\d+)/(\d+)\s+(\d+)\s+(\d+)\s+([\d.]+|-)\s*$`)

// `codexec status --watch` on a real pseudo-terminal redraws one screen in
// place: the jobs per second rise while jobs run, a killed worker leaves
// the screen once its presence lapses, and an interrupt ends it cleanly
// with the cursor shown again.
func TestStatusWatchOnTerminal(t *testing.T) {
	t.Parallel()
	cl := startCluster(t, 2)
	c := httpClient(t, cl.mcpURL)

	cmd := exec.Command(os.Args[0], "status", "--watch", "--interval", "300ms")
	cmd.Env = append(cl.env, "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		requireOrSkip(t, "a pseudo-terminal", err)
	}
	screen := &ptyScreen{}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(screen, tty) // ends with EIO once the process has exited
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = tty.Close()
		<-copied
	})

	screen.waitFrame(t, time.Minute, "both workers", func(f string) bool {
		return regexp.MustCompile(`(?m)^w1\s`).MatchString(f) && regexp.MustCompile(`(?m)^w2\s`).MatchString(f)
	})
	for i := range 4 {
		res, er := call(t, c, "execute_code", map[string]any{"code": fmt.Sprintf("print(%d)", i)})
		if res.IsError {
			t.Fatalf("%+v", er)
		}
	}
	screen.waitFrame(t, time.Minute, "jobs per second above 0 in the pool's row", func(f string) bool {
		m := poolRow.FindStringSubmatch(f)
		if m == nil {
			return false
		}
		r, err := strconv.ParseFloat(m[6], 64)
		return err == nil && r > 0
	})

	cl.workers[1].signal(syscall.SIGKILL)
	frame := screen.waitFrame(t, time.Minute, "w2 gone and one worker left", func(f string) bool {
		m := poolRow.FindStringSubmatch(f)
		return m != nil && m[1] == "1" && !regexp.MustCompile(`(?m)^w2\s`).MatchString(f)
	})
	if !regexp.MustCompile(`(?m)^w1\s`).MatchString(frame) {
		t.Errorf("w1 left the screen with w2:\n%s", frame)
	}

	out := screen.String()
	if !strings.HasPrefix(out, "\x1b[?25l\x1b[2J\x1b[H") {
		t.Errorf("the view does not start by hiding the cursor and clearing the screen: %q", out[:min(len(out), 40)])
	}
	if n := strings.Count(out, "\x1b[H"); n < 3 {
		t.Errorf("%d frames drawn in place, want several", n)
	}

	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Errorf("codexec status --watch exited %v on SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("codexec status --watch did not end on SIGINT")
	}
	// The process has exited: what it wrote last is read before the
	// terminal reports its end.
	select {
	case <-copied:
	case <-time.After(30 * time.Second):
		t.Fatal("the terminal did not report the end of codexec status")
	}
	if !strings.HasSuffix(screen.String(), "\x1b[?25h") {
		t.Errorf("the cursor is not shown again at the end: %q", tail(screen.String(), 40))
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }
