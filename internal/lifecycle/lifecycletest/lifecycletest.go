// Package lifecycletest checks that a component keeps the lifecycle
// contract (package lifecycle): Stop before Start, Stop twice, Start then
// Stop, a Start made to fail then Stop; after each, no goroutine and no
// child process that the component started may remain.
package lifecycletest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/internal/lifecycle"
	"go.uber.org/goleak"
)

// Factory makes a fresh component for one case. With fail true, its Start
// must fail, at a point after it has opened some of what it holds (the
// caller injects the failure: a closed connection, a bad path, an
// unreachable service), so that the check sees whether Start cleans up.
type Factory func(t *testing.T, fail bool) lifecycle.Service

// Options tune Check.
type Options struct {
	// NoFailure says the component's Start cannot be made to fail; the
	// failed-start case is then skipped, and says why (Reason).
	NoFailure bool
	Reason    string
	// Timeout bounds each Start and Stop. Default 60s.
	Timeout time.Duration
	// IgnoreGoroutines are functions (goleak.IgnoreTopFunction) whose
	// goroutines belong to the test's own fixtures, not to the component.
	IgnoreGoroutines []string
}

// Check runs every case of the contract against components made by mk.
// It must not run in parallel with other tests of the same process: it
// compares the process's goroutines and children before and after.
func Check(t *testing.T, mk Factory, opts Options) {
	t.Helper()
	if opts.Timeout <= 0 {
		opts.Timeout = time.Minute
	}
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"stop before start", func(t *testing.T) {
			s := mk(t, false)
			stop(t, s, opts.Timeout)
			stop(t, s, opts.Timeout)
		}},
		{"start then stop twice", func(t *testing.T) {
			s := mk(t, false)
			ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
			defer cancel()
			if err := s.Start(ctx); err != nil {
				t.Fatalf("Start: %v", err)
			}
			stop(t, s, opts.Timeout)
			stop(t, s, opts.Timeout)
		}},
		{"concurrent stops", func(t *testing.T) {
			s := mk(t, false)
			ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
			defer cancel()
			if err := s.Start(ctx); err != nil {
				t.Fatalf("Start: %v", err)
			}
			done := make(chan struct{})
			go func() { defer close(done); stop(t, s, opts.Timeout) }()
			stop(t, s, opts.Timeout)
			<-done
		}},
		{"failed start then stop", func(t *testing.T) {
			if opts.NoFailure {
				t.Skip(opts.Reason)
			}
			s := mk(t, true)
			ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
			defer cancel()
			if err := s.Start(ctx); err == nil {
				t.Fatal("Start succeeded although the factory injected a failure")
			}
			stop(t, s, opts.Timeout)
			stop(t, s, opts.Timeout)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ignore := []goleak.Option{goleak.IgnoreCurrent()}
			for _, f := range opts.IgnoreGoroutines {
				ignore = append(ignore, goleak.IgnoreTopFunction(f))
			}
			before := Descendants()
			c.run(t)
			if err := goleak.Find(ignore...); err != nil {
				t.Errorf("goroutines left behind: %v", err)
			}
			if left := waitDescendants(before, 5*time.Second); len(left) > 0 {
				t.Errorf("processes left behind: %s", strings.Join(left, "; "))
			}
		})
	}
}

func stop(t *testing.T, s lifecycle.Service, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// waitDescendants waits up to d for the process's descendants to be only
// those of before (a process being reaped may linger a moment) and returns
// the others, each as "pid command".
func waitDescendants(before map[int]string, d time.Duration) []string {
	deadline := time.Now().Add(d)
	for {
		var left []string
		for pid, cmd := range Descendants() {
			if _, ok := before[pid]; !ok {
				left = append(left, strconv.Itoa(pid)+" "+cmd)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Descendants returns the live (not zombie) descendants of this process,
// pid to command line, read from /proc. It returns nil where /proc is not
// there.
func Descendants() map[int]string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	cmd := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
		line, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmd[pid] = strings.TrimSpace(strings.ReplaceAll(string(line), "\x00", " "))
	}
	self := os.Getpid()
	out := map[int]string{}
	for pid := range parent {
		for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
			if p == self {
				out[pid] = cmd[pid]
				break
			}
		}
	}
	return out
}
