package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/workspace"
)

// A session's working directory follows its jobs from worker to worker.
// The state store records, per session, the worker that ran its last job
// (the holder, to which the frontend sends the next one) and the snapshot
// of the directory taken after the last job that changed it, stored in the
// broker's workspaces object store. Before a job, a worker whose own copy
// is not of that snapshot restores it; after the job, a worker whose
// directory changed takes a new snapshot, before the job's result is
// stored, so the files of every completed job outlive the worker.

// scopeLocks holds a mutex per session scope.
type scopeLocks struct{ m sync.Map }

// lock locks scope's mutex and returns its unlock.
func (l *scopeLocks) lock(scope string) func() {
	v, _ := l.m.LoadOrStore(scope, new(sync.Mutex))
	mu := v.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

// workspaceJob is what restoreWorkspace learnt before a job, for
// saveWorkspace after it.
type workspaceJob struct {
	scope  string
	rec    wire.Workspace // the store's record; zero when there was none
	known  bool           // the record could be read (found or not)
	local  localWorkspace // this worker's copy
	maxLen int64          // bytes of files a snapshot may hold
	// note is restoreWorkspace's, for the call's result.
	note string
	// away says the record could not be read, and the job runs on this
	// worker's copy because it is the newest this worker knows of
	// (unreachableCopy).
	away bool
}

// localWorkspace is what this worker knows of its copy of a session's
// directory: the snapshot it is (or was restored from) and its manifest
// at that point. Kept in the data directory, outside every sandbox.
type localWorkspace struct {
	Snapshot string `json:"snapshot"`
	Manifest string `json:"manifest"`
	// Holder says this copy is the session's newest as far as this worker
	// knows: the store's record, when this worker last wrote it or found
	// it naming this worker, named this worker as the holder of this copy
	// (or of the snapshot it changed since, while the record could not be
	// read). Only a holder's copy is run on while the record cannot be read.
	Holder bool `json:"holder,omitempty"`
	// Stored is the size of the snapshot this worker stored of this copy
	// (0 when it stored none): what the session's files take in the
	// workspaces store, which a sparse file makes far more than what they
	// take on disk (reportWorkdir counts the larger).
	Stored int64 `json:"stored,omitempty"`
	// Unrecorded is the snapshot this worker stored of this copy, and
	// linked as the session's newest, when the record could not be written
	// to name it: the copy holds it, and whatever changed since. A record
	// lost with the store is looked for through that link (latestSnapshot),
	// which then names this snapshot, not the one the copy is of.
	Unrecorded string `json:"unrecorded,omitempty"`
}

func (w *Worker) localWorkspacePath(scope string) string {
	return filepath.Join(w.cfg.DataDir, "workspaces", scope+".json")
}

func (w *Worker) loadLocalWorkspace(scope string) localWorkspace {
	var l localWorkspace
	if data, err := os.ReadFile(w.localWorkspacePath(scope)); err == nil {
		_ = json.Unmarshal(data, &l)
	}
	return l
}

func (w *Worker) saveLocalWorkspace(scope string, l localWorkspace) error {
	p := w.localWorkspacePath(scope)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	data, _ := json.Marshal(l)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// unrecordedManifest is the manifest remembered for a copy saved while its
// record could not be written: it matches no directory's, so the next job
// saves the copy again.
const unrecordedManifest = "unrecorded"

// filesUnreachable is the error of a job whose session's record cannot be
// read (the state store away) on a worker whose copy of the session's files
// is not known to be the newest: run on it, the job would answer ok on
// stale or missing files, and the copy saved first once the store is back
// would lose what the other copy's jobs wrote.
type filesUnreachable struct {
	worker string // this worker
	holder string // the job's KnownHolder
	err    error  // the store's
}

func (e *filesUnreachable) Error() string {
	where := "the frontend did not know which worker holds them"
	switch e.holder {
	case "", wire.NoHolder:
	default:
		where = "they were last known on worker " + e.holder
		if e.holder == e.worker {
			where += ", but this worker's copy is not known to be the newest"
		}
	}
	return fmt.Sprintf("the state store (Redis) is unreachable (%v), so worker %s cannot tell whether its copy of the session's files is the newest (%s): "+
		"nothing was run, so that nothing the session wrote is lost; try again once the store is back", e.err, e.worker, where)
}

// copyIsNewest says whether a job may run on this worker's copy local of
// scope, a session whose record cannot be read, known being the job's
// wire.Job.KnownHolder: the copy must be the newest this worker knows of
// (local.Holder), and the frontend must not know of another holder; or,
// when the frontend knew the session to have no files anywhere, this
// worker must have no copy either, and no snapshot of the session be
// stored (a session's first call: nothing can be lost, and what it writes
// here makes this worker its holder). A holder
// does not hear of another worker taking the session over while the store
// was there; that worker's save deleted the snapshot the holder's copy is
// of, so a copy whose snapshot is gone from the broker is not the newest.
func (w *Worker) copyIsNewest(ctx context.Context, scope string, local localWorkspace, known string) bool {
	switch {
	case known == wire.NoHolder && local == localWorkspace{}:
		// The frontend read no record of the session, but the store may
		// have lost it (restarted empty) while the session has files: a
		// stored snapshot says so, and the job would run on an empty
		// directory, its caller told what no file of the session holds,
		// and what it wrote dropped once the record came back.
		id, err := w.latestSnapshot(ctx, scope)
		return err == nil && id == ""
	case known != "" && known != wire.NoHolder && known != w.cfg.ID, !local.Holder:
		return false
	case local.Snapshot == "":
		return true
	}
	stored, err := w.broker.HasWorkspace(ctx, snapshotName(scope, local.Snapshot))
	return err == nil && stored
}

// forgetCopy records that this worker holds no copy of scope's files (its
// session file system was dropped): the next job restores the recorded
// snapshot, and a job while the record cannot be read is refused rather
// than run on an empty directory.
// It removes the worker's record of its copy, which needs no free block of
// a disk that may be full.
func (w *Worker) forgetCopy(scope string) error {
	defer w.workspaces.lock(scope)()
	if err := os.Remove(w.localWorkspacePath(scope)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// latestName is the link of the workspaces store that names scope's newest
// stored snapshot (broker.LinkWorkspace), written after each save: what
// finds the session's files when the state store has lost its record.
func latestName(scope string) string { return "latest-" + scope }

// latestSnapshot returns the id of scope's newest stored snapshot as its
// link names it; "" when there is none.
func (w *Worker) latestSnapshot(ctx context.Context, scope string) (string, error) {
	name, stored, err := w.broker.LinkedWorkspace(ctx, latestName(scope))
	if err != nil || !stored {
		return "", err
	}
	id, ok := strings.CutPrefix(name, snapshotName(scope, ""))
	if !ok || !wire.ValidSnapshot(id) {
		return "", nil
	}
	return id, nil
}

// snapshotName is the object holding the snapshot of scope taken after
// job snapshot.
func snapshotName(scope, snapshot string) string { return "ws-" + scope + "-" + snapshot }

// restoreWorkspace makes cwd hold the session's latest snapshot when this
// worker's copy is of another one (or it has none), owned by uid. On the
// holder, the common case, it costs one read of the state store. A
// snapshot that is gone (expired, or never stored) leaves cwd as it is; a
// snapshot that cannot be read fails the job, which may be retried. The
// snapshot's files are held to maxLen bytes, and on a session file system
// (disk, nil for none) to the disk limit maxLen, set again once the old
// files are gone. With Config.LocalWorkspaces it does nothing (and
// saveWorkspace neither).
//
// When the record cannot be read (the state store away), the job runs on
// this worker's copy only when copyIsNewest says so, known being the job's
// wire.Job.KnownHolder ("" for a call in a context); otherwise the error
// is a *filesUnreachable and nothing may run.
func (w *Worker) restoreWorkspace(ctx context.Context, scope, cwd string, uid int, disk *sessionDisk, maxLen int64, known string, log *slog.Logger) (*workspaceJob, error) {
	if w.cfg.LocalWorkspaces {
		return nil, nil
	}
	defer w.workspaces.lock(scope)()
	j := &workspaceJob{scope: scope, local: w.loadLocalWorkspace(scope), maxLen: maxLen}
	rec, err := w.readWorkspace(ctx, scope)
	if err != nil {
		if !w.copyIsNewest(ctx, scope, j.local, known) {
			log.Warn("workspace record unreadable and this worker's copy not known to be the newest; nothing runs",
				"known_holder", known, "err", err)
			return nil, &filesUnreachable{worker: w.cfg.ID, holder: known, err: err}
		}
		log.Warn("workspace record unreadable; the job runs on this worker's copy, the newest it knows", "err", err)
		j.away = true
		return j, nil
	}
	if rec.Snapshot == "" {
		// No record: a new session, or one whose record the state store
		// lost (restarted empty, or from an older copy). Run on whatever
		// copy this worker has, an empty directory where it has none, the
		// job would answer ok without the session's files and save that
		// as the session's; its newest snapshot is restored instead.
		if id, err := w.latestSnapshot(ctx, scope); err != nil {
			log.Warn("look for the session's newest snapshot", "err", err)
		} else if id != "" && id == j.local.Unrecorded {
			// This worker's own snapshot, stored when the record could not
			// be written: its copy holds it and what the session changed
			// here since, while the store was away. Restoring it used to
			// drop those changes (a call answered ok, its line gone).
			log.Warn("the session's record is missing from the state store; its newest stored files are this worker's copy, run on as it is", "snapshot", id)
			rec = wire.Workspace{V: wire.Version, Snapshot: j.local.Snapshot, Worker: w.cfg.ID, Stored: true}
		} else if id != "" {
			log.Warn("the session's record is missing from the state store but its files are stored: restoring them", "snapshot", id)
			rec = wire.Workspace{V: wire.Version, Snapshot: id, Stored: true}
		}
	}
	j.rec, j.known = rec, true
	if holder := rec.Worker == w.cfg.ID && rec.Snapshot == j.local.Snapshot; holder != j.local.Holder {
		// The record names this copy's holder (a record written before
		// copies knew whether they were the holder's), or the session
		// moved on to another worker.
		j.local.Holder = holder
		if err := w.saveLocalWorkspace(scope, j.local); err != nil {
			log.Warn("remember the workspace's holder", "err", err)
		}
	}
	if j.rec.Snapshot == "" {
		w.checkedCopies.Store(scope, struct{}{}) // nothing to check against: this run's jobs save what they change
		return j, nil
	}
	if j.rec.Snapshot == j.local.Snapshot && w.copyIntact(j, cwd, log) {
		return j, nil
	}
	if !j.rec.Stored {
		log.Warn("the session's latest files were not stored; the job runs on this worker's copy",
			"snapshot", j.rec.Snapshot, "holder", j.rec.Worker)
		return j, nil
	}
	if j.local.Manifest == unrecordedManifest {
		j.note = w.keepAside(ctx, j, cwd, log)
	}
	t0 := time.Now()
	r, err := w.broker.GetWorkspace(ctx, snapshotName(scope, j.rec.Snapshot))
	if errors.Is(err, broker.ErrWorkspaceNotFound) {
		log.Warn("the session's snapshot is gone; the job runs on this worker's copy", "snapshot", j.rec.Snapshot)
		return j, nil
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	// The old files go before the limit is set again: set over them (as
	// the job's limit was, before the restore), a copy that held more
	// than this call's limit left the ballast no room to hold it, and
	// the restore could use every block the clear freed.
	err = workspace.Clear(cwd)
	if err == nil {
		err = disk.setLimit(maxLen)
	}
	if err == nil {
		err = workspace.Unpack(r, cwd, uid, gidOf(uid), maxLen)
	}
	if err != nil {
		// The directory holds part of the snapshot: this worker's copy is
		// of none, and the next job restores again.
		if lerr := w.saveLocalWorkspace(scope, localWorkspace{Manifest: "partial"}); lerr != nil {
			log.Warn("forget the workspace's copy", "err", lerr)
		}
		return nil, err
	}
	m, err := workspace.Manifest(cwd, maxLen)
	if err != nil {
		return nil, err
	}
	j.local = localWorkspace{Snapshot: j.rec.Snapshot, Manifest: m}
	if err := w.saveLocalWorkspace(scope, j.local); err != nil {
		log.Warn("remember the restored workspace", "err", err)
	}
	w.checkedCopies.Store(scope, struct{}{})
	log.Info("workspace restored", "snapshot", j.rec.Snapshot, "from", j.rec.Worker, "ms", time.Since(t0).Milliseconds())
	return j, nil
}

// copyIntact reports whether this worker's copy of j's session, of the
// recorded snapshot, still holds what that snapshot holds. It is checked
// once in each run of the worker process, at the session's first job: an
// attempt cut off by the worker's end (kill -9, a crash, a hard stop that
// gave its job back) changed the copy and saved nothing, and its job,
// delivered again to this worker once restarted, ran over those changes,
// so that the files held the cut-off attempt's effects and the completed
// one's (a line appended twice). On another worker the attempt's changes
// were never seen: that worker restores the snapshot. A copy that
// changed is restored from the recorded snapshot when it was stored; one
// whose changes no snapshot holds (unrecordedManifest, made while the
// state store was away) is kept. Within one run, every job of the session
// goes through restoreWorkspace, and one that changed the copy saves it.
func (w *Worker) copyIntact(j *workspaceJob, cwd string, log *slog.Logger) bool {
	if _, ok := w.checkedCopies.Load(j.scope); ok || !j.rec.Stored || j.local.Manifest == unrecordedManifest {
		return true
	}
	if w.uses.inUse(j.scope) > 1 {
		// Another job or context of the session runs here, on this copy,
		// and saves what it changes: the copy is not checked under it.
		return true
	}
	m, err := workspace.Manifest(cwd, j.maxLen)
	if err != nil || m == j.local.Manifest {
		w.checkedCopies.Store(j.scope, struct{}{})
		return true
	}
	log.Warn("this worker's copy of the session changed after its last save, by an attempt that did not finish "+
		"before this worker process ended; the recorded snapshot is restored over it", "snapshot", j.rec.Snapshot)
	return false
}

// readWorkspace reads scope's record: the zero record when there is none.
func (w *Worker) readWorkspace(ctx context.Context, scope string) (wire.Workspace, error) {
	var rec wire.Workspace
	data, err := w.store.Get(ctx, w.cfg.Keys.Workspace(scope))
	if errors.Is(err, statestore.ErrNotFound) {
		return rec, nil
	}
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return wire.Workspace{}, fmt.Errorf("workspace record: %w", err)
	}
	return rec, nil
}

// gidOf is the group of a session's files: the session's uid in the
// sandbox, the worker's own group when jobs run as the worker's uid.
func gidOf(uid int) int {
	if uid == os.Getuid() {
		return os.Getgid()
	}
	return uid
}

// saveWorkspace runs after job: when cwd changed since this worker's copy
// was last saved or restored (or its copy is not of the recorded snapshot,
// or that snapshot nears its expiry), it snapshots cwd into the object
// store; then
// it records this worker as the session's holder, with the snapshot. It
// writes nothing when neither changed. Failures are logged: the files stay
// on this worker, which remains the holder. A directory too large to be
// saved (more entries than workspace.MaxEntries, a path past
// workspace.MaxPath) is recorded as not stored, and the note returned,
// for the call's result, says so; otherwise the note is "".
func (w *Worker) saveWorkspace(ctx context.Context, j *workspaceJob, jobID, cwd string, log *slog.Logger) (note string) {
	if j != nil && j.note != "" {
		defer func() { note = strings.TrimSpace(j.note + "\n" + note) }()
	}
	if j != nil && j.away {
		return w.keepWorkspace(ctx, j, jobID, cwd, log)
	}
	if j == nil || !j.known {
		return
	}
	defer w.workspaces.lock(j.scope)()
	ctx = context.WithoutCancel(ctx) // a completed job's files are saved even while the worker stops
	m, err := workspace.Manifest(cwd, j.maxLen)
	tooLarge := errors.Is(err, workspace.ErrTooLarge)
	if tooLarge {
		// Not stored, and not walked again (Pack) until it changes: the
		// manifest says only that it is over.
		note = fmt.Sprintf("the working directory was not saved off this worker (%v): "+
			"its files are on this worker only, and are lost if it goes", err)
		log.Warn("workspace too large to save", "err", err)
		m = "over its limit"
	} else if err != nil {
		log.Warn("workspace manifest", "err", err)
		return
	}
	// What this worker's record of its copy says now, read once for the
	// save (rememberHolder writes it only when it changes).
	disk := w.loadLocalWorkspace(j.scope)
	if disk != j.local {
		// Another job of the session, here, saved it meanwhile.
		j.local = disk
		if j.rec, err = w.readWorkspace(ctx, j.scope); err != nil {
			log.Warn("workspace record unreadable; holder not recorded", "err", err)
			return
		}
	}
	rec := j.rec
	rec.V, rec.Worker = wire.Version, w.cfg.ID
	saved := false
	unrecorded := j.local.Unrecorded // stored while the record could not name it (keepWorkspace)
	// A copy that is not of the recorded snapshot (that one was not stored,
	// or is gone) is the session's files from now on, and is saved as such.
	if m != j.local.Manifest || j.local.Snapshot != rec.Snapshot || snapshotAging(rec, j.local) {
		saved = true
		t0 := time.Now()
		rec.Snapshot = jobID
		var size int64
		if !tooLarge {
			rec.Stored, size = w.putSnapshot(ctx, j, jobID, cwd, log)
		}
		if rec.Stored {
			if err := w.broker.LinkWorkspace(ctx, latestName(j.scope), snapshotName(j.scope, jobID)); err != nil {
				log.Warn("link the session's newest snapshot", "err", err)
			}
		}
		rec.SavedAt = time.Now().UTC()
		j.local = localWorkspace{Snapshot: jobID, Manifest: m, Stored: size}
		log.Info("workspace saved", "snapshot", jobID, "stored", rec.Stored, "ms", time.Since(t0).Milliseconds())
	}
	if rec == j.rec {
		// Recorded already: this worker holds the newest copy.
		w.rememberHolder(j, true, disk, log)
		return
	}
	data, _ := json.Marshal(rec)
	if err := w.store.Set(ctx, w.cfg.Keys.Workspace(j.scope), data, broker.WorkspaceRetention); err != nil {
		log.Warn("record the workspace's holder", "err", err)
		if saved {
			// The record still names the snapshot before this job. Were
			// this copy remembered as the new snapshot, the next job here
			// would take it for an older copy than the recorded one and
			// restore that one over it, deleting what this job wrote (a
			// state store away for a second is enough). Remembered as a
			// copy of the recorded snapshot that changed since, it is run
			// on as it is, and saved by the next job. The snapshot just
			// stored stays, in case the write reached the store after all;
			// the store's retention removes it.
			// It is the newest copy if the record still names this
			// worker: then it is run on while the store is away.
			j.local = localWorkspace{Snapshot: j.rec.Snapshot, Manifest: unrecordedManifest, Holder: j.rec.Worker == w.cfg.ID, Stored: j.local.Stored}
			if rec.Stored {
				j.local.Unrecorded = jobID
			}
			if err := w.saveLocalWorkspace(j.scope, j.local); err != nil {
				log.Warn("remember the unrecorded workspace", "err", err)
			}
		} else {
			w.rememberHolder(j, j.rec.Worker == w.cfg.ID && j.local.Holder, disk, log)
		}
		return
	}
	w.rememberHolder(j, true, disk, log)
	if saved && unrecorded != "" && unrecorded != rec.Snapshot {
		// Superseded by the one just recorded (and linked).
		if err := w.broker.DeleteWorkspace(ctx, snapshotName(j.scope, unrecorded)); err != nil {
			log.Warn("delete the snapshot stored while the store was away", "err", err)
		}
	}
	// The previous snapshot goes once the record names another one, stored
	// or not: nothing reads a snapshot the record does not name (a restore
	// reads the recorded one, a collection deletes the recorded one), so
	// one left behind a snapshot that could not be stored (past the job's
	// disk limit) stayed in the store, counted by no quota, until its
	// retention; a session that alternated stored and unstored snapshots
	// left one of its directory's size behind each time.
	if j.rec.Stored && j.rec.Snapshot != rec.Snapshot {
		if err := w.broker.DeleteWorkspace(ctx, snapshotName(j.scope, j.rec.Snapshot)); err != nil {
			log.Warn("delete the previous snapshot", "err", err)
		}
	}
	return
}

// rememberHolder records in this worker's copy whether it is the holder's,
// after a save that found or wrote the record; disk is what the worker's
// record of its copy said before the save.
func (w *Worker) rememberHolder(j *workspaceJob, holder bool, disk localWorkspace, log *slog.Logger) {
	j.local.Holder = holder
	if disk == j.local {
		return
	}
	if err := w.saveLocalWorkspace(j.scope, j.local); err != nil {
		log.Warn("remember the saved workspace", "err", err)
	}
}

// keepAside stores this worker's copy of j's session, about to be replaced
// by the recorded snapshot although it holds changes no recorded snapshot
// holds (made while the record could not be read or written, and another
// worker recorded newer files since), as a snapshot of its own that no
// record names, kept for the snapshots' retention. It returns the note
// that says so.
func (w *Worker) keepAside(ctx context.Context, j *workspaceJob, cwd string, log *slog.Logger) string {
	id := "unsaved-" + ulid.Make().String()
	stored, _ := w.putSnapshot(ctx, j, id, cwd, log)
	log.Error("the session's files changed on two workers while the state store was away; this worker's copy is replaced by the recorded one",
		"kept_as", snapshotName(j.scope, id), "stored", stored, "recorded", j.rec.Snapshot, "holder", j.rec.Worker)
	if !stored {
		return fmt.Sprintf("files this session wrote on worker %s while the state store was away were replaced by newer ones from worker %s, and could not be kept",
			w.cfg.ID, j.rec.Worker)
	}
	return fmt.Sprintf("files this session wrote on worker %s while the state store was away were replaced by newer ones from worker %s; "+
		"the operator can recover them from snapshot %s of the workspaces store for a week", w.cfg.ID, j.rec.Worker, snapshotName(j.scope, id))
}

// keepWorkspace runs after a job that ran on the holder's copy while the
// record could not be read (j.away). Nothing can be recorded: a copy the
// job changed is remembered as a changed copy of the snapshot it was of,
// and still the holder's, so that the session's next jobs here run on it
// and the first one with the store back saves it (its manifest matches no
// directory's). The changed copy is also stored as a snapshot, linked as
// the session's newest (latestName) and remembered as Unrecorded: should
// the store come back without the session's record (restarted empty), the
// worker the session's next job goes to restores it by that link. Kept on
// this worker only, the changes were lost when that job went to another
// worker, which restored the older snapshot the link named (a call
// answered ok, its line gone). The note says, for the call's result,
// where the files are until then.
func (w *Worker) keepWorkspace(ctx context.Context, j *workspaceJob, jobID, cwd string, log *slog.Logger) (note string) {
	defer w.workspaces.lock(j.scope)()
	m, err := workspace.Manifest(cwd, j.maxLen)
	if err == nil && m == j.local.Manifest {
		// Unchanged: nothing to keep. A session's first call (no copy
		// here, none anywhere as the frontend knew) makes this copy the
		// holder's all the same, so that its next calls run here.
		if !j.local.Holder {
			j.local.Holder = true
			if err := w.saveLocalWorkspace(j.scope, j.local); err != nil {
				log.Warn("remember the workspace's holder", "err", err)
			}
		}
		return ""
	}
	unrecorded, stored := j.local.Unrecorded, j.local.Stored
	ctx = context.WithoutCancel(ctx)
	if err == nil {
		if ok, size := w.putSnapshot(ctx, j, jobID, cwd, log); ok {
			if lerr := w.broker.LinkWorkspace(ctx, latestName(j.scope), snapshotName(j.scope, jobID)); lerr != nil {
				log.Warn("link the session's newest snapshot", "err", lerr)
				_ = w.broker.DeleteWorkspace(ctx, snapshotName(j.scope, jobID))
			} else {
				if unrecorded != "" {
					_ = w.broker.DeleteWorkspace(ctx, snapshotName(j.scope, unrecorded))
				}
				unrecorded, stored = jobID, max(stored, size)
			}
		}
	}
	j.local = localWorkspace{Snapshot: j.local.Snapshot, Manifest: unrecordedManifest, Holder: true, Stored: stored, Unrecorded: unrecorded}
	if err := w.saveLocalWorkspace(j.scope, j.local); err != nil {
		log.Warn("remember the workspace kept while the store is away", "err", err)
	}
	log.Warn("workspace changed while the state store is away: kept on this worker, saved by the session's next job once the store is back")
	return fmt.Sprintf("the state store is unreachable: the working directory's changes are on worker %s only until the store is back "+
		"and the session's next call saves them", w.cfg.ID)
}

// snapshotRefresh is the age at which a stored snapshot of an unchanged
// directory is stored again, well before the store lets it expire
// (broker.WorkspaceRetention), so that a session used at least that often
// keeps its files however long it lasts.
var snapshotRefresh = broker.WorkspaceRetention / 7

// snapshotAging says whether rec's snapshot, which this worker's copy is
// of, should be stored again before it expires.
func snapshotAging(rec wire.Workspace, local localWorkspace) bool {
	return rec.Stored && rec.Snapshot == local.Snapshot && time.Since(rec.SavedAt) > snapshotRefresh
}

// putSnapshot streams a tar of cwd, at most j.maxLen bytes of files, into
// the object store, and reports whether it was stored and its size. A tar
// holds every byte of a sparse file's size, holes included, so that size
// may be far more than what the directory takes on disk.
func (w *Worker) putSnapshot(ctx context.Context, j *workspaceJob, jobID, cwd string, log *slog.Logger) (bool, int64) {
	pr, pw := io.Pipe()
	packed := make(chan error, 1)
	var size int64
	go func() {
		cw := &countingWriter{w: pw}
		err := workspace.Pack(cwd, cw, j.maxLen)
		size = cw.n
		pw.CloseWithError(err)
		packed <- err
	}()
	err := w.broker.PutWorkspace(ctx, snapshotName(j.scope, jobID), pr)
	pr.CloseWithError(errors.New("snapshot not stored"))
	if perr := <-packed; perr != nil {
		err = perr
	}
	if err != nil {
		log.Warn("workspace snapshot not stored: the session's files are on this worker only",
			"err", fmt.Errorf("snapshot of %s: %w", cwd, err))
		return false, 0
	}
	return true, size
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
