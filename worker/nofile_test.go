package worker

import (
	"log/slog"
	"testing"

	"github.com/codexec/codexec/worker/limits"
)

// On a host of 32,768 process ids (the kernel's default pid_max), eight
// jobs of one session at the pool's default maximum of 4,096 processes
// took them all, and every fork and thread of the host failed, root's
// included. The pool's maximum is capped so that every job and context a
// worker holds at once, each at the maximum, take at most a quarter.
func TestProcessesCappedToTheHostsShare(t *testing.T) {
	old := hostTaskBudget
	t.Cleanup(func() { hostTaskBudget = old })
	hostTaskBudget = func() int64 { return 32768 }

	w := &Worker{cfg: Config{Concurrency: 8, MaxContexts: 16, Limits: limits.Default, MaxLimits: limits.DefaultMax}, log: slog.New(slog.DiscardHandler)}
	w.capProcesses()
	share := int64(32768 / 4 / 24)
	if w.cfg.MaxLimits.Procs != share {
		t.Fatalf("maximum processes %d, want %d", w.cfg.MaxLimits.Procs, share)
	}
	if got := w.cfg.MaxLimits.Procs * int64(w.cfg.Concurrency+w.cfg.MaxContexts); got > 32768/4 {
		t.Fatalf("jobs and contexts at the maximum hold %d process ids of 32768", got)
	}
	if w.cfg.Limits.Procs != limits.Default.Procs {
		t.Fatalf("default %d changed, though under the cap", w.cfg.Limits.Procs)
	}

	// No maximum, and a default above the cap.
	w = &Worker{cfg: Config{Concurrency: 64, MaxContexts: 16, Limits: limits.Set{Procs: 1000}, MaxLimits: limits.Set{}}, log: slog.New(slog.DiscardHandler)}
	w.capProcesses()
	if share := int64(32768 / 4 / 80); w.cfg.MaxLimits.Procs != share || w.cfg.Limits.Procs != share {
		t.Fatalf("maximum %d and default %d, want both %d", w.cfg.MaxLimits.Procs, w.cfg.Limits.Procs, share)
	}

	// A host with room for every job at the maximum changes nothing.
	hostTaskBudget = func() int64 { return 4194304 }
	w = &Worker{cfg: Config{Concurrency: 8, MaxContexts: 16, Limits: limits.Default, MaxLimits: limits.DefaultMax}, log: slog.New(slog.DiscardHandler)}
	w.capProcesses()
	if w.cfg.MaxLimits != limits.DefaultMax || w.cfg.Limits != limits.Default {
		t.Fatalf("limits changed on a host of 4,194,304 process ids: %+v, %+v", w.cfg.MaxLimits, w.cfg.Limits)
	}
}
