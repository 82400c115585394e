package frontend

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// How a job becomes known, then queued, so that its caller is always told
// the truth: either the job will not run, or it has a job id whose result
// (or fate) get_job_result can fetch.
//
//	start the caller's record (the runs history, in the background)
//	       ─▶ broker.SubmitJob: the job's record, then the job (Nats-Msg-Id
//	          = job id), sent one after the other without waiting
//	       ─▶ the record acknowledged ─▶ the job id to the client (first
//	          progress notification), while the job's ack is on its way
//	       ─▶ not acknowledged: the record (unless stored), then the job,
//	          again until publishCutoff (the call waits publishPatience,
//	          then returns the job id and the retries go on without it)
//
// Sent together, the record and the job cost one round trip where one
// after the other they cost two (about 0.5 ms of a call). The id goes out
// once the record is stored, so get_job_result finds the job by its id
// whenever the client has it; a job whose record failed is in the
// frontend's unqueued list meanwhile, and its retries write the record.
//
// The retries are safe because the stream stores one message per message
// id within broker.DuplicateWindow, which the cutoff stays inside, and
// because no worker starts a job past its deadline (it stores an expired
// result instead), which the cutoff never passes either.

const (
	// publishPatience is how long a call waits for its job to be queued
	// before it returns the job id and leaves the retries to go on alone.
	publishPatience = 5 * time.Second
	// publishAttempt bounds each step of an attempt: writing the record,
	// publishing the job.
	publishAttempt = 5 * time.Second
	// publishPauseMax bounds the pause between two attempts.
	publishPauseMax = 2 * time.Second
)

// publishCutoff is when the retries of job stop: its deadline, or earlier
// where the deadline lies beyond the stream's duplicate window (an attempt
// that starts before the cutoff ends within the window).
func publishCutoff(job *wire.Job) time.Time {
	cutoff := job.EnqueuedAt.Add(broker.DuplicateWindow - publishAttempt)
	if job.Deadline.Before(cutoff) {
		return job.Deadline
	}
	return cutoff
}

// publisher is one job's way into the queue.
type publisher struct {
	f    *Frontend
	job  *wire.Job
	opts []broker.PublishOption

	// recorded is set once the job's record is written.
	recorded bool
	// maybeSent is set once an attempt to publish failed in a way that does
	// not rule out that the stream stored the job (its ack did not come).
	maybeSent bool
	// lastErr is the last attempt's failure.
	lastErr error
}

// submit records job, tells the client its id and publishes it (see the
// top of this file); recordRun, when not nil, starts the caller's record
// of the job first. It returns nil once the job is queued, a rejection
// when the job can never be queued, and otherwise a toolError naming the
// job: queued at most once later, or (when the retries ended within the
// call's patience) not queued.
func (f *Frontend) submit(ctx context.Context, job *wire.Job, recordRun func(context.Context), opts ...broker.PublishOption) error {
	p := &publisher{f: f, job: job, opts: opts}
	if recordRun != nil {
		recordRun(ctx)
	}
	// Once its id may be out, the job is queued whether or not its caller
	// is still there: its attempts do not end with the call.
	err := p.first(context.WithoutCancel(ctx), func() { f.announceJob(ctx, job) })
	switch {
	case err == nil:
		return nil
	case errors.Is(err, wire.ErrPayloadTooLarge):
		p.forget()
		return rejected("code is too large to send: %v", err)
	}
	f.log.Warn("job not queued yet; retrying", "job", job.ID, "err", err, "until", publishCutoff(job))
	pending := p.pending(err)
	p.lastErr = err
	u := f.unqueued.add(job)
	done := make(chan error, 1)
	go func() {
		err := p.retry(context.WithoutCancel(ctx))
		f.unqueued.settle(u, err == nil, p.maybeSent)
		done <- err
	}()
	patience := time.NewTimer(publishPatience)
	defer patience.Stop()
	select {
	case err := <-done:
		if err == nil {
			return nil
		}
		return p.gaveUp(err)
	case <-patience.C:
	case <-ctx.Done():
	}
	go func() {
		if err := <-done; err != nil {
			f.log.Error("job not queued", "job", job.ID, "err", err)
			return
		}
		f.log.Info("job queued after its call returned", "job", job.ID)
	}()
	return pending
}

// first is the first attempt: the record and the job sent together
// (broker.SubmitJob); announce is called once, as soon as the record is
// stored or failed, or when neither was sent.
func (p *publisher) first(ctx context.Context, announce func()) error {
	ctx, cancel := context.WithTimeout(ctx, publishAttempt)
	defer cancel()
	announced := false
	recErr, err := p.f.broker.SubmitJob(ctx, broker.RecordOf(p.job), p.job, func(err error) {
		p.recorded = err == nil
		announced = true
		announce()
	}, p.opts...)
	if !announced {
		announce()
	}
	if err != nil && !broker.NotSent(err) {
		p.maybeSent = true
	}
	if err == nil {
		err = recErr // queued, but the record is still to be written: the retries write it
	}
	return err
}

// attempt writes the job's record unless written already, then publishes
// the job.
func (p *publisher) attempt(ctx context.Context) error {
	if err := p.record(ctx); err != nil {
		return err
	}
	return p.publish(ctx)
}

// record writes the job's record unless written already, within
// publishAttempt.
func (p *publisher) record(ctx context.Context) error {
	if p.recorded {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, publishAttempt)
	defer cancel()
	if err := p.f.broker.PutJobRecord(ctx, broker.RecordOf(p.job)); err != nil {
		return err
	}
	p.recorded = true
	return nil
}

// publish publishes the job, within publishAttempt.
func (p *publisher) publish(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, publishAttempt)
	defer cancel()
	err := p.f.broker.PublishJob(ctx, p.job, p.opts...)
	if err != nil && !broker.NotSent(err) {
		p.maybeSent = true
	}
	return err
}

// retry attempts again, at growing intervals, until an attempt succeeds,
// the connection is closed for good (the frontend stops), or the cutoff
// passes. It returns nil only for an attempt that succeeded; p.lastErr is
// set (to the first attempt's failure) before it starts.
func (p *publisher) retry(ctx context.Context) error {
	ctx, cancel := context.WithDeadline(ctx, publishCutoff(p.job))
	defer cancel()
	pause := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return p.lastErr
		case <-time.After(pause):
		}
		pause = min(2*pause, publishPauseMax)
		err := p.attempt(ctx)
		switch {
		case err == nil:
			return nil
		case p.f.broker.Conn().IsClosed():
			return err // the frontend is stopping
		case ctx.Err() == nil || p.lastErr == nil:
			p.lastErr = err
		}
	}
}

// forget deletes the record of a job that can never be queued (best
// effort: a record left behind reads as expired after the deadline).
func (p *publisher) forget() {
	if !p.recorded {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), publishAttempt)
	defer cancel()
	if err := p.f.broker.DeleteJobRecord(ctx, p.job.ID); err != nil {
		p.f.log.Warn("delete job record", "job", p.job.ID, "err", err)
	}
}

// pending is what a call returns while its job is not queued yet and the
// retries go on.
func (p *publisher) pending(err error) *toolError {
	te := internal("job %s is not queued yet (%v). codexec keeps trying until %s and queues it at most once: "+
		"do not send the code again; get_job_result with this job_id returns its result once it has run, "+
		"says running while it waits or runs, and expired if it never ran",
		p.job.ID, err, publishCutoff(p.job).Format(time.RFC3339))
	te.JobID = p.job.ID
	return te
}

// gaveUp is what a call returns when the retries ended before the call's
// patience did.
func (p *publisher) gaveUp(err error) *toolError {
	var te *toolError
	if p.maybeSent {
		te = internal("codexec could not confirm that job %s was queued (%v) and stopped trying; "+
			"get_job_result with this job_id tells whether it ran", p.job.ID, err)
	} else {
		te = internal("job %s could not be queued before its deadline (%v): it did not run and will not", p.job.ID, err)
	}
	te.JobID = p.job.ID
	return te
}

// unqueuedJobs are the jobs whose publishing a frontend retries: their
// record may not be written yet (NATS is down), so get_job_result asks here
// before it calls a job unknown. A job leaves once queued, or, when the
// retries gave up, once its record would read as expired.
type unqueuedJobs struct{ m sync.Map } // job id ─▶ *unqueuedJob

// unqueuedJob is one job of unqueuedJobs.
type unqueuedJob struct {
	rec *broker.JobRecord
	// never is set when the retries gave up and no attempt can have
	// reached the stream: the job will not run.
	never atomic.Bool
}

func (u *unqueuedJobs) add(job *wire.Job) *unqueuedJob {
	j := &unqueuedJob{rec: broker.RecordOf(job)}
	u.m.Store(job.ID, j)
	return j
}

// settle records how j's retries ended.
func (u *unqueuedJobs) settle(j *unqueuedJob, queued, maybeSent bool) {
	if queued {
		u.m.Delete(j.rec.JobID)
		return
	}
	j.never.Store(!maybeSent)
	time.AfterFunc(time.Until(settledBy(j.rec)), func() { u.m.Delete(j.rec.JobID) })
}

// get returns the job of id, or nil.
func (u *unqueuedJobs) get(id string) *unqueuedJob {
	j, _ := u.m.Load(id)
	uj, _ := j.(*unqueuedJob)
	return uj
}

// background is work started at most once and waited for, if started.
type background struct {
	fn      func(context.Context)
	started atomic.Bool
	done    chan struct{}
}

func newBackground(fn func(context.Context)) *background {
	return &background{fn: fn, done: make(chan struct{})}
}

// start runs the work in a goroutine; a second call does nothing.
func (b *background) start(ctx context.Context) {
	if b.started.CompareAndSwap(false, true) {
		go func() {
			defer close(b.done)
			b.fn(ctx)
		}()
	}
}

// wait returns once the work is done, at once if it never started.
func (b *background) wait() {
	if b.started.Load() {
		<-b.done
	}
}

// progressTokenKey is the context key of the call's progress token.
type progressTokenKey struct{}

// withProgressToken returns ctx carrying req's progress token, if it has
// one, for announceJob.
func withProgressToken(ctx context.Context, req mcp.CallToolRequest) context.Context {
	if req.Params.Meta == nil || req.Params.Meta.ProgressToken == nil {
		return ctx
	}
	return context.WithValue(ctx, progressTokenKey{}, req.Params.Meta.ProgressToken)
}

// announceJob tells the client job's id in a progress notification (the
// first of the call: progress 0) when the call asked for progress, so that
// a client whose connection drops before the result can still fetch it.
func (f *Frontend) announceJob(ctx context.Context, job *wire.Job) {
	token, _ := ctx.Value(progressTokenKey{}).(mcp.ProgressToken)
	srv := server.ServerFromContext(ctx)
	if token == nil || srv == nil {
		return
	}
	err := srv.SendNotificationToClient(ctx, "notifications/progress", map[string]any{
		"progressToken": token, "progress": 0,
		"message": "job " + job.ID + " submitted; cancelling this call cancels the job; if the call is cut off otherwise (its frontend went away), get_job_result with this job_id fetches its result",
	})
	if err != nil {
		f.log.Debug("announce job", "job", job.ID, "err", err)
	}
}
