package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/diskfs"
)

// Collected workspaces. When a workspace is collected (frontend/gc.go),
// the collector leaves a notice in the state store (Keys.Collected); every
// worker reads the notices at Start, before it takes a job, then whenever
// Keys.CollectedSeq changes (polled every collectPoll), and removes what it
// keeps of each collected scope: the session's file system (unmounted,
// then its image), its working directory, its scripts directory, its
// local workspace record, and the workspace's last snapshot in the
// broker's object store.
//
// A scope in use is never pulled from under its jobs: removal holds the
// scope's lock, which a job or context takes to start using the scope
// (useScope), and it keeps the files of a scope that a job or context of
// this worker uses now or used after the collection's time (the workspace
// lives again: the files are its). A job that arrives for a collected
// workspace after the removal starts in an empty directory. Each worker
// records, in DataDir/collected, the notices it applied, so that a notice
// read again (after a restart) never removes the files of a later use.
//
// Paths come from scopes, which pass wire.ValidScope (no '/', no '.') and
// are then joined to one of the worker's own directories and checked to
// be right below it (scopePath): a notice with any other scope is ignored.

// collectPoll is how often a worker looks for new collections.
var collectPoll = 5 * time.Second

// scopeUses is what jobs and contexts of this worker use of each scope.
type scopeUses struct {
	locks scopeLocks // held while a scope's use starts, and while it is removed
	mu    sync.Mutex
	use   map[string]*scopeUse

	seq        string // Keys.CollectedSeq when the notices were last applied
	stop, done chan struct{}
}

type scopeUse struct {
	running int       // jobs and contexts using it now
	last    time.Time // when one last started or ended
}

// useScope counts a job (or context) on scope until endScope. It waits
// while the scope is being removed.
func (w *Worker) useScope(scope string) {
	u := &w.uses
	defer u.locks.lock(scope)()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.use == nil {
		u.use = map[string]*scopeUse{}
	}
	su := u.use[scope]
	if su == nil {
		su = &scopeUse{}
		u.use[scope] = su
	}
	su.running++
	su.last = time.Now()
}

// endScope ends a use that useScope counted.
func (w *Worker) endScope(scope string) {
	u := &w.uses
	u.mu.Lock()
	defer u.mu.Unlock()
	if su := u.use[scope]; su != nil {
		su.running--
		su.last = time.Now()
	}
}

// inUse is how many jobs and contexts use scope now.
func (u *scopeUses) inUse(scope string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	if su := u.use[scope]; su != nil {
		return su.running
	}
	return 0
}

// releaseSession ends a job's (or context's) use of its session's
// directories, which sessionDirs began.
func (w *Worker) releaseSession(scope string, disk *sessionDisk) {
	w.sessionFS.release(disk)
	w.endScope(scope)
}

// usedSince says whether a job or context uses scope now, or used it
// after at (the caller holds the scope's lock).
func (u *scopeUses) usedSince(scope string, at time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	su := u.use[scope]
	return su != nil && (su.running > 0 || su.last.After(at))
}

// forgetUseAfter is how long a scope's last use is remembered: much longer
// than a notice takes to reach a worker that runs (collectPoll), after
// which a notice's time is later than that use anyway.
const forgetUseAfter = time.Hour

// forgetIdle forgets the scopes unused since before.
func (u *scopeUses) forgetIdle(before time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for scope, su := range u.use {
		if su.running == 0 && su.last.Before(before) {
			delete(u.use, scope)
		}
	}
}

// startCollections applies the notices already there, then polls for new
// ones until stopCollections.
func (w *Worker) startCollections(ctx context.Context) {
	w.applyCollections(ctx)
	w.uses.stop, w.uses.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.uses.done)
		t := time.NewTicker(collectPoll)
		defer t.Stop()
		for {
			select {
			case <-w.uses.stop:
				return
			case <-t.C:
				w.applyCollections(context.Background())
			}
		}
	}()
}

// stopCollections stops the poll and waits for a removal under way.
func (w *Worker) stopCollections() {
	if w.uses.stop != nil {
		close(w.uses.stop)
		<-w.uses.done
	}
}

// applyCollections reads the notices when they changed and applies each
// one this worker has not. A failure is logged, and the next poll tries
// again.
func (w *Worker) applyCollections(ctx context.Context) {
	seq, err := w.store.Get(ctx, w.cfg.Keys.CollectedSeq())
	if errors.Is(err, statestore.ErrNotFound) {
		seq, err = nil, nil
	}
	if err != nil {
		w.log.Warn("read the collections' notices", "err", err)
		return
	}
	if w.uses.seq != "" && string(seq) == w.uses.seq {
		return
	}
	notices, err := w.store.HGetAll(ctx, w.cfg.Keys.Collected())
	if err != nil {
		w.log.Warn("read the collections' notices", "err", err)
		return
	}
	ok := true
	for scope, data := range notices {
		var n wire.CollectedWorkspace
		if !wire.ValidScope(scope) || json.Unmarshal(data, &n) != nil {
			continue
		}
		if err := w.applyCollection(ctx, scope, n); err != nil {
			w.log.Warn("remove a collected workspace", "scope", scope, "err", err)
			ok = false
		}
	}
	w.forgetApplied(notices)
	w.uses.forgetIdle(time.Now().Add(-forgetUseAfter))
	if ok {
		w.uses.seq = string(seq)
	}
}

// applyCollection removes what this worker keeps of scope, collected at
// n.At, unless it applied that notice already or the scope is in use (or
// was used since), and records that it applied it.
func (w *Worker) applyCollection(ctx context.Context, scope string, n wire.CollectedWorkspace) error {
	marker, err := scopePath(w.collectedDir(), scope, "")
	if err != nil {
		return err
	}
	if applied, err := readApplied(marker); err != nil || !applied.Before(n.At) {
		return err
	}
	defer w.uses.locks.lock(scope)()
	if w.uses.usedSince(scope, n.At) {
		w.log.Info("collected workspace used again since: its files stay", "scope", scope, "collected", n.At)
	} else {
		if err := w.removeScope(ctx, scope, n); err != nil {
			return err
		}
		w.log.Info("collected workspace removed", "scope", scope, "collected", n.At)
	}
	return writeApplied(marker, n.At)
}

// removeScope removes what this worker keeps of scope (its lock held, no
// job or context using it).
func (w *Worker) removeScope(ctx context.Context, scope string, n wire.CollectedWorkspace) error {
	if w.sessionFS != nil {
		if err := w.sessionFS.discard(scope); err != nil {
			return err
		}
	}
	dir, err := scopePath(w.sessionsRoot(), scope, "")
	if err != nil {
		return err
	}
	if mounts, err := diskfs.MountsUnder(dir); err != nil || len(mounts) > 0 {
		return errors.Join(err, fmt.Errorf("%s has file systems mounted below it: %v", dir, mounts))
	}
	if scripts, err := scopePath(w.cfg.ScriptsDir, scope, ""); err == nil {
		w.scripts.forget(scripts)
	}
	w.checkedCopies.Delete(scope)
	for _, p := range []struct{ root, suffix string }{
		{w.sessionsRoot(), ""}, {w.cfg.ScriptsDir, ""},
		{filepath.Join(w.cfg.DataDir, "disks"), ".img"},
		{filepath.Join(w.cfg.DataDir, "disks"), ".img.mkfs"},
		{filepath.Join(w.cfg.DataDir, "workspaces"), ".json"},
		{filepath.Join(w.cfg.DataDir, "workspaces"), ".json.tmp"},
	} {
		path, err := scopePath(p.root, scope, p.suffix)
		if err != nil {
			return err
		}
		if err := os.RemoveAll(path); err != nil {
			return err
		}
	}
	if n.Snapshot != "" && wire.ValidSnapshot(n.Snapshot) {
		if err := w.broker.DeleteWorkspace(ctx, snapshotName(scope, n.Snapshot)); err != nil {
			return err
		}
	}
	if w.cfg.LocalWorkspaces {
		return nil
	}
	return w.broker.DeleteWorkspace(ctx, latestName(scope))
}

// scopePath is root/scope+suffix, for a valid scope only, and only when
// that is an entry of root itself.
func scopePath(root, scope, suffix string) (string, error) {
	if !wire.ValidScope(scope) {
		return "", fmt.Errorf("invalid scope %q", scope)
	}
	root = filepath.Clean(root)
	p := filepath.Join(root, scope+suffix)
	if filepath.Dir(p) != root || filepath.Base(p) != scope+suffix {
		return "", fmt.Errorf("scope %q leaves %s", scope, root)
	}
	return p, nil
}

func (w *Worker) collectedDir() string { return filepath.Join(w.cfg.DataDir, "collected") }

// readApplied is the collection time of the notice last applied, from
// marker; zero when none was.
func readApplied(marker string) (time.Time, error) {
	data, err := os.ReadFile(marker)
	if errors.Is(err, os.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	var at time.Time
	if at.UnmarshalText(data) != nil {
		return time.Time{}, nil // unreadable: applied again, which is harmless
	}
	return at, nil
}

func writeApplied(marker string, at time.Time) error {
	if err := os.MkdirAll(filepath.Dir(marker), 0o700); err != nil {
		return err
	}
	data, _ := at.MarshalText()
	tmp := marker + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, marker)
}

// forgetApplied removes the records of applied notices that are no longer
// in the store (past wire.CollectedRetention): nothing will read them.
func (w *Worker) forgetApplied(notices map[string][]byte) {
	entries, err := os.ReadDir(w.collectedDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		if _, ok := notices[e.Name()]; !ok {
			_ = os.Remove(filepath.Join(w.collectedDir(), e.Name()))
		}
	}
}

// discard unmounts scope's file system, if mounted, and removes its image,
// for a collected scope that no job uses.
func (s *sessionFS) discard(scope string) error {
	defer s.scopes.lock(scope)()
	s.mu.Lock()
	d := s.disks[scope]
	if d != nil && d.users > 0 {
		s.mu.Unlock()
		return fmt.Errorf("session file system of %s in use", scope)
	}
	delete(s.disks, scope)
	s.mu.Unlock()
	if d != nil {
		if err := d.fs.Unmount(); err != nil {
			return err
		}
	}
	image, err := scopePath(s.images, scope, ".img")
	if err != nil {
		return err
	}
	if err := os.Remove(image); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
