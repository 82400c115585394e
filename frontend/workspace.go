package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// workspaceHolder returns the worker that holds the working directory of
// job's session, when job should be sent there; otherwise "", and
// placement decides. The holder (the worker that ran the session's last
// job, see worker/workspaces.go) must be alive and consume its own
// subject, and the job must be an execution, an install or a read or
// write of a file of the session's (an inspection
// reads an environment, not the session's files). For a job with an
// environment, the cheaper move wins: the holder when it holds the
// environment, or when no worker does and it can build it; a worker that
// holds the environment when the holder does not (restoring a snapshot
// costs milliseconds, building an environment seconds to minutes). A
// holder that dies after this choice is handled as any targeted worker
// (watchTarget), and the worker that then runs the job restores the
// session's last snapshot. live says adverts are the store's now.
//
// The job carries what this frontend knows of the holder
// (wire.Job.KnownHolder), for a worker that cannot read the record. While
// the record cannot be read (the store away) the job goes to the holder
// this frontend last knew (holderMemory), alive or not as far as anyone
// can tell: any other worker's copy may be stale, and a worker refuses to
// run a session's job on a copy it does not know to be the newest, so the
// call fails (with the reason) rather than answering ok on stale files
// whose changes the newer copy would later replace. Within outageMemory of
// a failed presence read, a holder missing from the presence records is
// waited for (awaitHolder): its record may have expired with the store,
// and its copy hold changes it could not record yet.
func (f *Frontend) workspaceHolder(ctx context.Context, job *wire.Job, adverts []envspec.Advert, live bool) string {
	if job.Kind != wire.KindExecute && job.Kind != wire.KindInstall && job.Kind != wire.KindFiles {
		return ""
	}
	var rec wire.Workspace
	data, err := f.store.Get(ctx, f.cfg.Keys.Workspace(job.Scope))
	switch {
	case errors.Is(err, statestore.ErrNotFound):
		// None recorded. Right after an outage, a worker this frontend
		// saw run one of the session's jobs holds its files all the same:
		// its record could not be written (the store away). Otherwise
		// (and always in `codexec dev`, which records no holder)
		// placement decides.
		w := f.holders.get(job.Scope)
		if w != "" && w != wire.NoHolder && f.presence.failedWithin(time.Now(), outageMemory) {
			rec.Worker = w
			break
		}
		f.holders.put(job.Scope, wire.NoHolder)
		job.KnownHolder = wire.NoHolder
		return "" // none yet: placement decides
	case err != nil:
		// Unreadable (the store away): the holder this frontend last
		// knew, whose copy is the newest; the pool for a session it never
		// read, or read no holder of, where a worker runs it only on a
		// copy it knows to be the newest.
		job.KnownHolder = f.holders.get(job.Scope)
		if job.KnownHolder == wire.NoHolder {
			return ""
		}
		if job.KnownHolder != "" {
			f.log.Warn("session record unreadable; sending the job to the worker last known to hold its files",
				"job", job.ID, "scope", job.Scope, "worker", job.KnownHolder, "err", err)
		}
		return job.KnownHolder
	case json.Unmarshal(data, &rec) != nil:
		return ""
	default:
		f.holders.put(job.Scope, rec.Worker)
	}
	if rec.Worker == "" {
		return ""
	}
	job.KnownHolder = rec.Worker
	targeted := func(as []envspec.Advert) int {
		return slices.IndexFunc(as, func(a envspec.Advert) bool { return a.WorkerID == rec.Worker && a.Targeted })
	}
	i := targeted(adverts)
	if i < 0 || !live {
		if !f.presence.failedWithin(time.Now(), outageMemory) {
			return "" // the holder is gone: placement decides
		}
		fresh, err := f.awaitHolder(ctx, rec.Worker)
		if err != nil {
			return rec.Worker // the presence unreadable: as while the store is away
		}
		if adverts, i = fresh, targeted(fresh); i < 0 {
			return "" // not back: placement decides
		}
	}
	if job.Env == nil {
		return rec.Worker
	}
	_, holds, err := envspec.Choose(adverts[i:i+1], *job.Env, job.EnvID)
	if err != nil {
		return "" // the holder cannot run it
	}
	if !holds {
		if _, held, _ := envspec.Choose(adverts, *job.Env, job.EnvID); held {
			return "" // another worker holds it
		}
	}
	return rec.Worker
}

// awaitHolder waits up to AnnounceWait for worker to be in the pool's
// presence records, as a worker announces itself again within about a
// second of the store's return (a session's holder, whose record expired
// with the store, may hold changes it could not record: placed elsewhere,
// the session's job would run on the last recorded snapshot without them,
// and its save replace them). It returns the records once worker is among
// them, nil if it is not by then, and an error if they cannot be read.
func (f *Frontend) awaitHolder(ctx context.Context, worker string) ([]envspec.Advert, error) {
	deadline := time.Now().Add(f.cfg.AnnounceWait)
	for {
		adverts, live, err := f.presenceOf(ctx)
		if err == nil && !live {
			err = ErrStoreUnreachable
		}
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(adverts, func(a envspec.Advert) bool { return a.WorkerID == worker }) {
			return adverts, nil
		}
		if !time.Now().Before(deadline) {
			f.log.Warn("the session's holder has not announced itself since the state store failed; placing the job elsewhere",
				"worker", worker, "waited", f.cfg.AnnounceWait)
			return nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(announcePoll):
		}
	}
}

// rememberHolder records, from res, the worker that holds job's session's
// working directory now: the worker that ran an execution, or wrote a
// file, saved the directory and recorded itself as its holder (or, with
// the store away, kept it to save later).
func (f *Frontend) rememberHolder(job *wire.Job, res *wire.Result) {
	switch {
	case res == nil || res.WorkerID == "":
		return
	case job.Kind == wire.KindExecute:
	case job.Kind == wire.KindFiles && job.File != nil && job.File.Op == wire.FileWrite:
	default:
		return
	}
	switch res.Status {
	case wire.StatusOK, wire.StatusError, wire.StatusTimeout, wire.StatusLimit:
		f.holders.put(job.Scope, res.WorkerID)
	}
}
