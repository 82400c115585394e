package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/codexec/codexec/wire"
)

// A job's caller may cancel it at any time (broker.CancelJob: a mark in the
// results bucket). The worker listens for the mark while it runs the job
// and stops the job when it comes: the job's context ends with
// errJobCancelled as its cause, which kills the job's process group (in a
// sandbox its PID namespace, and its cgroup is emptied), as a timeout
// does. A job marked before it started is not started at all. Either way
// its result says cancelled; a job that had finished keeps its result.

// errJobCancelled is the cause of a job context ended by a cancel.
var errJobCancelled = errors.New("worker: the job was cancelled by its caller")

// cancelCheckTimeout bounds the read of a job's cancel mark before it starts.
const cancelCheckTimeout = 5 * time.Second

// cancelWatch is a job's watch for its cancel mark, started before the job
// is claimed: the mark is read while the claim is written (two round trips
// to NATS at once where they were one after the other), and the listener
// is on before the read, so a cancel lands in one or the other.
type cancelWatch struct {
	jctx      context.Context
	cancel    context.CancelCauseFunc
	stopWatch func()
	read      chan bool // the first read of the mark
	at        time.Time // when that read started
}

// cancelMarkFresh is how old the first read of the mark may be when the
// job starts; past it (the claim waited for another attempt), the mark is
// read again.
const cancelMarkFresh = time.Second

// startCancelWatch starts listening for job's cancel mark, then reads it
// in the background.
func (w *Worker) startCancelWatch(ctx context.Context, job *wire.Job, log *slog.Logger) *cancelWatch {
	jctx, cancel := context.WithCancelCause(ctx)
	stopWatch, err := w.broker.WatchCancel(job.ID, func() {
		log.Info("job cancelled by its caller; stopping it")
		cancel(errJobCancelled)
	})
	if err != nil {
		log.Warn("cannot watch for the job's cancellation", "err", err)
		stopWatch = func() {}
	}
	cw := &cancelWatch{jctx: jctx, cancel: cancel, stopWatch: stopWatch, read: make(chan bool, 1), at: time.Now()}
	go func() { cw.read <- w.cancelMarked(ctx, job, log) }()
	return cw
}

// stop stops watching and ends the job's context.
func (cw *cancelWatch) stop() {
	cw.stopWatch()
	cw.cancel(nil)
}

// await returns a context of ctx that ends with errJobCancelled when job
// is cancelled, and the function that stops watching. cancelled says the
// job was cancelled before it started: it must not run. A mark that
// cannot be read is taken for none (the job runs; the watch still stops
// it if the mark comes).
func (cw *cancelWatch) await(ctx context.Context, w *Worker, job *wire.Job, log *slog.Logger) (jctx context.Context, stop func(), cancelled bool) {
	marked := <-cw.read
	if !marked && time.Since(cw.at) > cancelMarkFresh {
		marked = w.cancelMarked(ctx, job, log)
	}
	return cw.jctx, cw.stop, marked || jobCancelled(cw.jctx)
}

// cancelMarked reads job's cancel mark.
func (w *Worker) cancelMarked(ctx context.Context, job *wire.Job, log *slog.Logger) bool {
	rctx, end := context.WithTimeout(ctx, cancelCheckTimeout)
	marked, err := w.broker.JobCancelled(rctx, job.ID)
	end()
	if err != nil && ctx.Err() == nil {
		log.Warn("cannot read the job's cancel mark; running it", "err", err)
	}
	return marked
}

// jobCancelled says jctx, from watchCancel, ended because the job was
// cancelled.
func jobCancelled(jctx context.Context) bool {
	return errors.Is(context.Cause(jctx), errJobCancelled)
}

// cancelledResult is the result of a job cancelled before it started.
func (w *Worker) cancelledResult(job *wire.Job, attempt int) *wire.Result {
	return w.result(job, attempt, wire.StatusCancelled, "cancelled by its caller before it started: it did not run")
}

// markCancelled turns the result of a run stopped by a cancel into a
// cancelled result, keeping what the job wrote until then. A run that
// ended on its own (exit code 0, or its own error) as the cancel came
// keeps its result.
func markCancelled(res *wire.Result) {
	if res.Status == wire.StatusOK || (res.Status == wire.StatusError && res.Signal == "") {
		return
	}
	res.Status, res.Limit = wire.StatusCancelled, ""
	res.Message = "cancelled by its caller: the job and every process it started were stopped"
}
