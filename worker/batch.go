package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/runner"
	"golang.org/x/sys/unix"
)

// Batch jobs (wire/batch.go) come from a consumer of their own that runs at
// most Config.BatchConcurrency of them, and takes one only while fewer jobs
// run on this worker than its concurrency: they fill slots interactive jobs
// leave idle, and an interactive job, whose consumer keeps its own slots,
// never waits behind them for a slot, and behind few of them for the
// worker's interpreters.

// AllSlots as Config.BatchConcurrency gives batch jobs every slot: for a
// worker that runs nothing else (codexec batch on one machine).
const AllSlots = -1

// batchIdlePoll is how often a batch consumer waiting for an idle slot
// looks at the worker's load.
const batchIdlePoll = 10 * time.Millisecond

// startBatch starts consuming the pool's batch jobs. A failure is logged:
// the worker runs interactive jobs without it.
func (w *Worker) startBatch(ctx context.Context) {
	c, err := w.broker.ConsumeBatch(ctx, w.cfg.Pool, w.cfg.BatchConcurrency, w.batchIdle, w.handle)
	if err != nil {
		w.log.Warn("no batch consumer: this worker runs no batch jobs", "err", err)
		return
	}
	w.mu.Lock()
	w.batch = c
	w.mu.Unlock()
}

// batchIdle blocks until fewer jobs run here than the worker's concurrency;
// false when ctx ends first.
func (w *Worker) batchIdle(ctx context.Context) bool {
	t := time.NewTicker(batchIdlePoll)
	defer t.Stop()
	for w.load.Load() >= int64(w.cfg.Concurrency) {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// stopBatch starts stopping the batch consumer, if any, beside the pool's
// (as Stop stops the pool's), and returns what waits for its jobs.
func (w *Worker) stopBatch(ctx context.Context) (wait func()) {
	w.mu.Lock()
	c := w.batch
	w.mu.Unlock()
	if c == nil {
		return func() {}
	}
	go func() { _ = c.Stop(ctx) }()
	return func() {
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// batchCancelled says that job belongs to a batch cancelled before it
// started. A mark that cannot be read counts as none: the job runs.
func (w *Worker) batchCancelled(ctx context.Context, job *wire.Job, log *slog.Logger) bool {
	if job.Batch == "" {
		return false
	}
	cancelled, err := w.broker.BatchCancelled(ctx, job.Scope)
	if err != nil {
		log.Warn("batch cancel mark unreadable; running the job", "err", err)
	}
	return cancelled
}

// withParams gives a batch job's parameter row to its script in the
// environment variable wire.ParamsEnv.
func withParams(spec *runner.Spec, job *wire.Job) {
	if len(job.Params) > 0 {
		spec.Env = append(spec.Env, wire.ParamsEnv+"="+string(job.Params))
	}
}

// withOutputDir makes a batch job's output folder below cwd (owned by
// uid, no link followed) and names it to the script in the environment
// variable wire.OutputDirEnv.
func withOutputDir(spec *runner.Spec, job *wire.Job, cwd string, uid int) error {
	if job.OutputDir == "" {
		return nil
	}
	if err := wire.CheckWorkspacePath(job.OutputDir); err != nil {
		return fmt.Errorf("output folder %q: %w", job.OutputDir, err)
	}
	dir, err := unix.Open(cwd, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	for _, name := range strings.Split(job.OutputDir, "/") {
		next, err := mkdirBeneath(dir, name, uid)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("output folder %q: %w", job.OutputDir, err)
		}
		dir = next
	}
	unix.Close(dir)
	spec.Env = append(spec.Env, wire.OutputDirEnv+"="+job.OutputDir)
	return nil
}

// outputDirFiles are the files a batch job wrote below its output folder
// since it started, at most wire.MaxChangedFiles, with a note when more
// were left out.
func outputDirFiles(cwd string, job *wire.Job, since time.Time) (files []string, notes []string) {
	all := allChangedFiles(cwd, job.OutputDir, since)
	for _, rel := range all[:min(len(all), wire.MaxChangedFiles)] {
		files = append(files, job.OutputDir+"/"+rel)
	}
	if n := len(all) - len(files); n > 0 {
		notes = append(notes, fmt.Sprintf("%d more files in %s left out: a job's result lists at most %d", n, job.OutputDir, wire.MaxChangedFiles))
	}
	return files, notes
}
