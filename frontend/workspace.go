package frontend

import (
	"context"
	"encoding/json"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/wire"
)

// workspaceHolder returns the worker that holds the working directory of
// job's session, when job should be sent there: an execution job, whose
// session's holder (the worker that ran its last job, see
// worker/workspaces.go) is alive, consumes its own subject and can run the
// job's environment (holds it or can build it). Otherwise "", and
// placement decides. The holder wins over a worker that holds the
// environment already: the session's files are where its code expects
// them without a restore, and the environment is built once per worker.
// A holder that dies after this choice is handled as any targeted worker
// (watchTarget), and the worker that then runs the job restores the
// session's last snapshot.
func (f *Frontend) workspaceHolder(ctx context.Context, job *wire.Job, adverts []envspec.Advert) string {
	if job.Kind != wire.KindExecute {
		return ""
	}
	data, err := f.store.Get(ctx, f.cfg.Keys.Workspace(job.Scope))
	if err != nil {
		return "" // none yet, or unreadable: placement decides
	}
	var rec wire.Workspace
	if json.Unmarshal(data, &rec) != nil || rec.Worker == "" {
		return ""
	}
	for _, a := range adverts {
		if a.WorkerID != rec.Worker || !a.Targeted {
			continue
		}
		if job.Env != nil {
			if _, _, err := envspec.Choose([]envspec.Advert{a}, *job.Env, job.EnvID); err != nil {
				return ""
			}
		}
		return a.WorkerID
	}
	return ""
}
