package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

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
// record that cannot be read (the store away) gives way to the holder
// this frontend last read (holderMemory). A
// holder that dies after this choice is handled as any targeted worker
// (watchTarget), and the worker that then runs the job restores the
// session's last snapshot.
func (f *Frontend) workspaceHolder(ctx context.Context, job *wire.Job, adverts []envspec.Advert) string {
	if job.Kind != wire.KindExecute && job.Kind != wire.KindInstall && job.Kind != wire.KindFiles {
		return ""
	}
	var rec wire.Workspace
	data, err := f.store.Get(ctx, f.cfg.Keys.Workspace(job.Scope))
	switch {
	case errors.Is(err, statestore.ErrNotFound):
		f.holders.put(job.Scope, "")
		return "" // none yet: placement decides
	case err != nil:
		// Unreadable (the store away): the holder this frontend last
		// read, whose copy is the newest; placement decides for a
		// session it never read.
		rec.Worker = f.holders.get(job.Scope)
	case json.Unmarshal(data, &rec) != nil:
		return ""
	default:
		f.holders.put(job.Scope, rec.Worker)
	}
	if rec.Worker == "" {
		return ""
	}
	i := slices.IndexFunc(adverts, func(a envspec.Advert) bool { return a.WorkerID == rec.Worker && a.Targeted })
	if i < 0 {
		return ""
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
