package batch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"
)

// The run loop: keep up to window jobs submitted and unfinished, reading
// the input one row at a time; poll the unfinished ones; write each result
// as it comes. Memory holds the unfinished jobs and a bit per row, never
// the input or the results.

const (
	pollMin = 250 * time.Millisecond
	pollMax = 2 * time.Second
	// callFailures is how many calls in a row may fail before the run
	// gives up (to be resumed later).
	callFailures = 10
)

// flight is a submitted job not finished yet.
type flight struct {
	r       row
	attempt int64
	jobID   string
}

// runner runs one batch.
type runner struct {
	st      *state
	conn    *conn
	script  string
	in      input
	window  int
	log     io.Writer
	prog    progress
	counts  counts
	eof     bool
	flights map[string]*flight // by job id
	again   []pending          // to submit again
	tries   map[int64]int      // infrastructure failures per row
	failing int                // calls failed in a row
	cancel  bool               // the cancel mark was seen and sent
	// notBefore is when rows deferred by a quota of the caller's tenant
	// may be submitted again; deferring says such rows are waiting (for
	// one log line per stretch of them).
	notBefore time.Time
	deferring bool
}

// deferWaitMax bounds the wait a deferral asks for, so that a
// frontend's odd answer never stalls the batch for long.
const deferWaitMax = time.Minute

// run runs the batch until every row is finished, or it is cancelled, or
// ctx ends (the batch can be resumed).
func (r *runner) run(ctx context.Context) error {
	r.flights, r.tries = map[string]*flight{}, map[int64]int{}
	poll := pollMin
	for {
		if err := r.checkCancel(ctx); err != nil {
			return err
		}
		if err := r.fill(ctx); err != nil {
			return err
		}
		r.show()
		if len(r.flights) == 0 && len(r.again) == 0 && (r.eof || r.cancel) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
		n, err := r.poll(ctx)
		if err != nil {
			return err
		}
		if n > 0 {
			poll = pollMin
		} else {
			poll = min(2*poll, pollMax)
		}
	}
}

// show updates the progress display.
func (r *runner) show() {
	r.counts.running = int64(len(r.flights))
	r.counts.failed = r.st.failed
	r.counts.ok = int64(len(r.st.done)) - r.st.failed
	r.prog.show(r.counts)
}

// checkCancel sends a cancel mark left by `codexec batch cancel` (which
// could not reach an embedded codexec running in this process) once, and
// stops submitting.
func (r *runner) checkCancel(ctx context.Context) error {
	if r.cancel || !r.st.cancelled() {
		return nil
	}
	ids := make([]string, 0, len(r.flights))
	for id := range r.flights {
		ids = append(ids, id)
	}
	if err := r.conn.cancel(ctx, r.st.spec.ID, ids); err != nil {
		return err
	}
	r.cancel, r.again, r.eof = true, nil, true
	fmt.Fprintf(r.log, "batch %s cancelled: jobs not started yet will not start\n", r.st.spec.ID)
	return nil
}

// fill submits jobs until window are unfinished or the input is read.
func (r *runner) fill(ctx context.Context) error {
	for !r.cancel {
		if time.Now().Before(r.notBefore) {
			return nil // a quota deferred rows: none is sent before then
		}
		var batch []pending
		code := 0 // bytes of code the call's jobs carry: at most maxCallCode, but for its first job
		fits := func(p pending) bool {
			n := len(p.r.Code)
			if n == 0 {
				n = len(r.script)
			}
			if len(batch) > 0 && code+n > maxCallCode {
				return false
			}
			code += n
			return true
		}
		room := r.window - len(r.flights)
		for len(batch) < min(room, maxPerCall) && len(r.again) > 0 && fits(r.again[0]) {
			batch, r.again = append(batch, r.again[0]), r.again[1:]
		}
		for len(batch) < min(room, maxPerCall) && len(r.again) == 0 && !r.eof {
			p, ok, err := r.nextRow()
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			if p.attempt < 0 {
				room-- // resumed in flight, not sent again
				continue
			}
			if !fits(p) {
				r.again = append(r.again, p) // the next call's first
				break
			}
			batch = append(batch, p)
		}
		if len(batch) == 0 {
			return nil
		}
		if err := r.submit(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// nextRow reads the next row: ok false for a row already finished; a row
// submitted before (a resumed batch) is put in flight under its job id
// and returned with attempt -1.
func (r *runner) nextRow() (pending, bool, error) {
	row, err := r.in.next()
	if errors.Is(err, io.EOF) {
		r.eof = true
		return pending{}, false, nil
	}
	if err != nil {
		return pending{}, false, err
	}
	if r.st.done[row.N] {
		return pending{}, false, nil
	}
	if sub, ok := r.st.sent[row.N]; ok {
		r.flights[sub.JobID] = &flight{r: row, attempt: sub.Attempt, jobID: sub.JobID}
		return pending{attempt: -1}, true, nil
	}
	return pending{r: row}, true, nil
}

// submit sends batch, journals the ids and puts what was queued in flight.
func (r *runner) submit(ctx context.Context, batch []pending) error {
	ans, err := r.conn.submit(ctx, r.st.spec, r.script, batch)
	if err != nil {
		if ferr := r.callFailed(err); ferr != nil {
			return ferr
		}
		r.again = append(batch, r.again...)
		return nil
	}
	r.failing = 0
	subs := make([]submission, 0, len(ans))
	for i, a := range ans {
		subs = append(subs, submission{Row: batch[i].r.N, Attempt: batch[i].attempt, JobID: a.JobID})
	}
	// The ids are derived from the batch, row and attempt: journaled after
	// the call, a job the client did not record is submitted again under
	// the same id, which the frontend does not queue twice.
	if err := r.st.recordSent(subs); err != nil {
		return err
	}
	deferred := 0
	for i, a := range ans {
		p := batch[i]
		switch a.Status {
		case "queued", "submitted_before":
			r.flights[a.JobID] = &flight{r: p.r, attempt: p.attempt, jobID: a.JobID}
		case "deferred":
			// Over a quota of the tenant: the same job, later, not a
			// failure and no retry spent.
			r.again = append(r.again, p)
			wait := min(max(time.Duration(a.RetryAfterMS)*time.Millisecond, pollMin), deferWaitMax)
			r.notBefore = later(r.notBefore, time.Now().Add(wait))
			if deferred++; deferred == 1 && !r.deferring {
				fmt.Fprintf(r.log, "batch %s: rows wait for the tenant's quota (%s); submitting them as it allows\n", r.st.spec.ID, a.Message)
			}
		case "internal":
			if !r.retry(p, a.jobResult, false) {
				if err := r.finish(ctx, p.r, p.attempt, a.jobResult); err != nil {
					return err
				}
			}
		default:
			if err := r.finish(ctx, p.r, p.attempt, a.jobResult); err != nil {
				return err
			}
		}
	}
	r.deferring = deferred > 0
	return r.st.flush()
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// callFailed counts a failed call; too many in a row is the run's error.
func (r *runner) callFailed(err error) error {
	r.failing++
	fmt.Fprintf(r.log, "batch %s: %v\n", r.st.spec.ID, err)
	if r.failing >= callFailures {
		return fmt.Errorf("%d calls in a row failed, the last: %w (run the batch again to resume it)", r.failing, err)
	}
	return nil
}

// poll asks for the unfinished jobs and settles those that finished; it
// returns how many did.
func (r *runner) poll(ctx context.Context) (int, error) {
	ids := make([]string, 0, len(r.flights))
	for id := range r.flights {
		ids = append(ids, id)
	}
	settled := 0
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), maxPerCall)]
		ids = ids[len(chunk):]
		ans, err := r.conn.results(ctx, r.st.spec.ID, chunk)
		if err != nil {
			return settled, r.callFailed(err)
		}
		r.failing = 0
		for _, a := range ans {
			n, err := r.settle(ctx, a.jobResult)
			if err != nil {
				return settled, err
			}
			settled += n
		}
	}
	return settled, r.st.flush()
}

// settle acts on one job's state: 1 when it left flight.
func (r *runner) settle(ctx context.Context, res jobResult) (int, error) {
	f := r.flights[res.JobID]
	if f == nil {
		return 0, nil
	}
	switch res.Status {
	case "running":
		return 0, nil
	case "unknown":
		// Journaled but never received: the same job again.
		delete(r.flights, res.JobID)
		r.again = append(r.again, pending{r: f.r, attempt: f.attempt})
		return 1, nil
	case "internal", "expired":
		delete(r.flights, res.JobID)
		if r.retry(pending{r: f.r, attempt: f.attempt}, res, true) {
			return 1, nil
		}
		return 1, r.finish(ctx, f.r, f.attempt, res)
	}
	delete(r.flights, res.JobID)
	return 1, r.finish(ctx, f.r, f.attempt, res)
}

// retry queues p again after an infrastructure failure, unless its rows
// retries are spent (false). next asks for a new attempt (a job that may
// have run: a new id); otherwise the same job is sent again.
func (r *runner) retry(p pending, res jobResult, next bool) bool {
	if r.tries[p.r.N] >= r.st.spec.Retries || r.cancel {
		return false
	}
	r.tries[p.r.N]++
	if next {
		p.attempt++
	}
	fmt.Fprintf(r.log, "batch %s: row %d: %s (%s); trying again (%d of %d)\n",
		r.st.spec.ID, p.r.N, res.Status, res.Message, r.tries[p.r.N], r.st.spec.Retries)
	r.again = append(r.again, p)
	return true
}

// finish collects the files a row's job wrote to its output folder, then
// records its result. Stopped while collecting, the row stays unfinished:
// resuming collects what is missing.
func (r *runner) finish(ctx context.Context, row row, attempt int64, res jobResult) error {
	res.collected, res.Notes = collectFiles(ctx, r.conn.readFile, r.st.spec.ID, filepath.Join(r.st.dir, "jobs", row.Name), row, res)
	if err := ctx.Err(); err != nil {
		return err
	}
	r.counts.finishedHere++
	return r.st.finish(row, attempt, res)
}
