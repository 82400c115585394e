package codefiles

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codexec/codexec/codefiles/internal/safedir"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
)

// Errors of CodeStore. Tools turn them into clear messages; callers match
// them with errors.Is.
var (
	ErrFileNotFound = errors.New("code file not found")
	ErrFileTooLarge = errors.New("code file would exceed its size limit")
	ErrTooManyFiles = errors.New("too many code files in this session")
	ErrRunNotFound  = errors.New("run not found")
	// ErrStorageFull says a write would take the session past
	// Config.MaxSessionBytes.
	ErrStorageFull = errors.New("the session's storage limit is reached")
	// ErrTenantFull says a write would take the code files of the
	// session's tenant past the limit of its counter (ForTenant). The
	// error also wraps the *statestore.QuotaError with the figures.
	ErrTenantFull = errors.New("the tenant's code-file quota is reached")
)

// CodeStore keeps each session's code files and the history of the code it
// ran, in the state store, so that any frontend of a cluster serves any call
// and nothing is lost when a process restarts (Redis with its append-only
// file; the bbolt file of `codexec dev`).
//
// # Layout (keys from statestore.Keys)
//
//	CodeFile(scope, name)  string  the file's content
//	CodeFiles(scope)       hash    name → {size, created, updated}
//	RunCode(scope, sha)    string  code the session ran, once per distinct content
//	Runs(scope)            hash    job id → {filename, source_file, size, time, code_sha256}
//	Usage(scope)           string  bytes the session keeps: files plus distinct run code
//	Scopes()               hash    scope → unix ms of its latest write (for export)
//
// # What a session keeps
//
// Every write of a file's content is a counted write (statestore's Quota,
// keyed Usage(scope), limit MaxSessionBytes): the content and the counter
// change in one atomic step, so a write that would take the session past
// its budget writes nothing and fails with ErrStorageFull, whichever
// frontend serves it. The code of a run is a shared value of the runs
// index (statestore's Link): running the same code again adds an index
// entry and a reference, not a copy, and the code is charged to the budget
// once. Dropping runs (past RunHistory, past RunRetention, or to make room
// for a new run's code under the budget, oldest first) unlinks them, and the
// store deletes a code with its last run, in the same step that drops the
// reference, so a run recorded concurrently by another frontend never
// refers to a deleted code.
//
// # Consistency
//
// The content key is the truth: a file exists while its content key does.
// An append is one statestore Append, atomic and O(len(piece)) in both
// stores, so concurrent appends from any number of frontends all land, in
// some order, none lost, and the size limit holds exactly. The index hash is
// written after the content (and on delete, removed before it), each a
// separate call:
//
//   - The size in the index is the size after the latest write that reached
//     it; concurrent appends may record their sizes out of order. Listings
//     and reads therefore measure the content (Len/Get) instead.
//   - The limit on the number of files is checked (HLen) before a new file is
//     written, so concurrent initialize calls of new names can pass it by at
//     most their number.
//   - An append that races with a delete of the same file may recreate it
//     holding only that piece. A process that dies between writing content
//     and index leaves a file that reads and appends fine and reappears in
//     listings at its next append.
//
// # The on-disk copy
//
// When Config.MirrorDir is set (`codexec dev` sets it to the scripts
// directory), every file is also written through to
// MirrorDir/<scope>/files/<name> as a plain file, so a local user finds
// it with any editor. The copy is written without following links (package
// safedir); an append writes its piece at the offset the store reported, or
// rewrites the copy from the store when the copy is not at that offset yet.
// The writes of a file's copy are serialised in the process (lockMirror),
// so concurrent appends leave the copy identical to the store; an
// initialize_code_file that races an append of the same file may leave the
// copy with that piece where the store has none, until the next write.
// Only `codexec dev` has a copy, and it is the one process. The store stays
// the truth: edits made on disk are not read back and are overwritten by
// the next initialize_code_file.
type CodeStore struct {
	st   statestore.Store
	keys statestore.Keys
	cfg  Config
	log  *slog.Logger
	// tenant, when its Key is set, is the counter of the code-file bytes
	// of every session of the tenant (ForTenant).
	tenant statestore.Quota
	// pruning holds the scopes whose run history this process is pruning
	// (shared by the ForTenant copies).
	pruning *sync.Map
	// mirrorLocks serialise the writes of each file's on-disk copy (shared
	// by the ForTenant copies; a file's lock is one of them by its hash).
	mirrorLocks *[64]sync.Mutex
}

// NewCodeStore returns the code-file store of cfg (its Keys, limits and
// MirrorDir) over st. The frontend's tools use it, and `codexec export`
// reads with it what frontends wrote.
func NewCodeStore(st statestore.Store, cfg Config) *CodeStore {
	cfg = cfg.WithDefaults()
	return &CodeStore{st: st, keys: cfg.Keys, cfg: cfg, log: cfg.Logger, pruning: new(sync.Map), mirrorLocks: new([64]sync.Mutex)}
}

// FileInfo describes a code file.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Path is the plain-file copy on disk (`codexec dev`), or "" when there is none.
	Path string `json:"-"`
	// Warning says what went wrong writing the on-disk copy, if anything did.
	Warning string `json:"-"`
}

// fileMeta is what the CodeFiles index holds per file.
type fileMeta struct {
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// RunInfo describes one recorded run: a job the frontend published. It is
// also an entry of list_code_files' structured output (frontend.ListResult),
// so its JSON tags are part of that tool's output schema.
type RunInfo struct {
	JobID string `json:"job_id"`
	// Filename is the name the script ran under.
	Filename string `json:"filename"`
	// SourceFile is the code file it was read from (execute_code_file), or
	// "" for execute_code.
	SourceFile string    `json:"source_file,omitempty"`
	Size       int64     `json:"size"`
	Time       time.Time `json:"time"`
}

// Init creates code file name of scope with content, or replaces the
// content of an existing one; replaced reports which, and oldSize the size
// it replaced. name must be a valid code-file name (Resolve returns one;
// so does wire.CleanFilename).
func (cs *CodeStore) Init(ctx context.Context, scope, name, content string) (info FileInfo, replaced bool, oldSize int64, err error) {
	if int64(len(content)) > cs.cfg.MaxFileBytes {
		return info, false, 0, fmt.Errorf("%w: the content is %d bytes and the limit is %d bytes", ErrFileTooLarge, len(content), cs.cfg.MaxFileBytes)
	}
	key := cs.keys.CodeFile(scope, name)
	oldSize, err = cs.st.Len(ctx, key)
	switch {
	case err == nil:
		replaced = true
	case errors.Is(err, statestore.ErrNotFound):
		oldSize = 0
		n, err := cs.st.HLen(ctx, cs.keys.CodeFiles(scope))
		if err != nil {
			return info, false, 0, err
		}
		if n >= int64(cs.cfg.MaxFiles) {
			return info, false, 0, fmt.Errorf("%w: it has %d and the limit is %d; delete_code_file removes one", ErrTooManyFiles, n, cs.cfg.MaxFiles)
		}
	default:
		return info, false, 0, err
	}
	old, err := cs.st.SetCounted(ctx, key, []byte(content), cs.quota(scope))
	if err != nil {
		return info, false, 0, cs.storageError(err, "nothing was written")
	}
	replaced, oldSize = old >= 0, max(old, 0)
	now := time.Now().UTC()
	m := fileMeta{Size: int64(len(content)), Created: now, Updated: now}
	if err := cs.putMeta(ctx, scope, name, m); err != nil {
		return info, false, 0, err
	}
	cs.touchScope(ctx, scope)
	info = FileInfo{Name: name, Size: m.Size, Created: m.Created, Updated: m.Updated}
	cs.mirror(scope, &info, func(d *safedir.Dir) error {
		// From the store, not content: an append that landed after this
		// write may already have written its piece to the copy.
		full, err := cs.st.Get(ctx, key)
		if err != nil {
			return err
		}
		return d.WriteFile(name, full)
	})
	return info, replaced, oldSize, nil
}

// Append adds piece to the end of code file name of scope. It fails with
// ErrFileNotFound when the file does not exist, and with ErrFileTooLarge
// (writing nothing) when the result would exceed MaxFileBytes.
func (cs *CodeStore) Append(ctx context.Context, scope, name, piece string) (FileInfo, error) {
	key := cs.keys.CodeFile(scope, name)
	if _, err := cs.st.Len(ctx, key); err != nil {
		if errors.Is(err, statestore.ErrNotFound) {
			return FileInfo{}, ErrFileNotFound
		}
		return FileInfo{}, err
	}
	n, err := cs.st.AppendCounted(ctx, key, []byte(piece), cs.cfg.MaxFileBytes, cs.quota(scope))
	if errors.Is(err, statestore.ErrOverQuota) {
		return FileInfo{}, cs.storageError(err, "nothing was appended")
	}
	if errors.Is(err, statestore.ErrTooLarge) {
		size, _ := cs.st.Len(ctx, key)
		return FileInfo{}, fmt.Errorf("%w: the file has %d bytes, the piece %d, and the limit is %d bytes; nothing was appended",
			ErrFileTooLarge, size, len(piece), cs.cfg.MaxFileBytes)
	}
	if err != nil {
		return FileInfo{}, err
	}
	now := time.Now().UTC()
	m := cs.meta(ctx, scope, name)
	m.Size, m.Updated = n, now
	if m.Created.IsZero() {
		m.Created = now
	}
	if err := cs.putMeta(ctx, scope, name, m); err != nil {
		// The piece is in; only the listing's timestamps are stale.
		cs.log.Warn("code file index not updated after an append", "scope", scope, "file", name, "err", err)
	}
	info := FileInfo{Name: name, Size: n, Created: m.Created, Updated: m.Updated}
	cs.mirror(scope, &info, func(d *safedir.Dir) error {
		off := n - int64(len(piece))
		size, err := d.Size(name)
		switch {
		case err == nil && size == off:
			return d.WriteAt(name, []byte(piece), off)
		case err == nil && size >= n:
			// A later write of the copy, from the store, already holds
			// this piece.
			return nil
		}
		// The copy is missing, not a plain file, or behind (another
		// append's piece has not reached it yet): rewrite it from the store,
		// whose content includes this piece and every one before it.
		full, err := cs.st.Get(ctx, key)
		if err != nil {
			return err
		}
		return d.WriteFile(name, full)
	})
	return info, nil
}

// Read returns the content of code file name of scope.
func (cs *CodeStore) Read(ctx context.Context, scope, name string) (string, FileInfo, error) {
	data, err := cs.st.Get(ctx, cs.keys.CodeFile(scope, name))
	if errors.Is(err, statestore.ErrNotFound) {
		return "", FileInfo{}, ErrFileNotFound
	}
	if err != nil {
		return "", FileInfo{}, err
	}
	m := cs.meta(ctx, scope, name)
	info := FileInfo{Name: name, Size: int64(len(data)), Created: m.Created, Updated: m.Updated, Path: cs.mirrorPath(scope, name)}
	return string(data), info, nil
}

// List returns scope's code files by name. Sizes are measured, not taken
// from the index (see the type's comment).
func (cs *CodeStore) List(ctx context.Context, scope string) ([]FileInfo, error) {
	all, err := cs.st.HGetAll(ctx, cs.keys.CodeFiles(scope))
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, 0, len(all))
	for name, raw := range all {
		if n, err := validName(name); err != nil || n != name {
			continue // not written by this code; never used as a key
		}
		size, err := cs.st.Len(ctx, cs.keys.CodeFile(scope, name))
		if errors.Is(err, statestore.ErrNotFound) {
			continue // deleted, or its writer died before writing it
		}
		if err != nil {
			return nil, err
		}
		var m fileMeta
		_ = json.Unmarshal(raw, &m)
		out = append(out, FileInfo{Name: name, Size: size, Created: m.Created, Updated: m.Updated, Path: cs.mirrorPath(scope, name)})
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes code file name of scope, and its on-disk copy. It returns
// the size the file had, or ErrFileNotFound.
func (cs *CodeStore) Delete(ctx context.Context, scope, name string) (int64, error) {
	key := cs.keys.CodeFile(scope, name)
	size, err := cs.st.Len(ctx, key)
	if errors.Is(err, statestore.ErrNotFound) {
		return 0, ErrFileNotFound
	}
	if err != nil {
		return 0, err
	}
	if err := cs.st.HDel(ctx, cs.keys.CodeFiles(scope), name); err != nil {
		return 0, err
	}
	if _, err := cs.st.DeleteCounted(ctx, key, cs.quota(scope)); err != nil && !errors.Is(err, statestore.ErrNotFound) {
		return 0, err
	}
	if cs.cfg.MirrorDir != "" {
		defer cs.lockMirror(scope, name)()
		d, err := safedir.Open(cs.cfg.MirrorDir, false, scope, "files")
		if err == nil {
			err = d.Remove(name)
			d.Close()
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			cs.log.Warn("remove the on-disk copy of a deleted code file", "scope", scope, "file", name, "err", err)
		}
	}
	return size, nil
}

// Scopes returns every session scope that has code files or recorded runs.
func (cs *CodeStore) Scopes(ctx context.Context) ([]string, error) {
	all, err := cs.st.HGetAll(ctx, cs.keys.Scopes())
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(all))
	for s := range all {
		if wire.ValidScope(s) {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out, nil
}

// runEntry is what the Runs index holds per run: the RunInfo, and the
// SHA-256 of its code, the name of its shared value RunCode(scope, sha).
// Runs recorded before runs shared their code have no SHA-256 and keep
// their code under Run(scope, jobID).
type runEntry struct {
	RunInfo
	CodeSHA256 string `json:"code_sha256,omitempty"`
}

// maxRoomAttempts bounds how often RecordRun drops old runs and tries again
// when the session's budget refuses a new run's code; each attempt drops at
// least one run, and concurrent runs of the session may take the room made.
const maxRoomAttempts = 8

// RecordRun keeps the code of a job that scope ran, for RunRetention, and
// indexes it. The code is stored once per distinct content: a run of code
// the session already keeps adds only its index entry. When the code would
// take the session past MaxSessionBytes, its oldest runs are dropped to make
// room; a code that does not fit even then is refused with ErrStorageFull.
// When the session has more than RunHistory runs the oldest are dropped, a
// tenth of RunHistory at a time, so that pruning (which reads the whole
// index) happens once per RunHistory/10 runs rather than on each.
func (cs *CodeStore) RecordRun(ctx context.Context, scope string, run RunInfo, code string) error {
	sum := sha256.Sum256([]byte(code))
	run.Size = int64(len(code))
	entry := runEntry{RunInfo: run, CodeSHA256: hex.EncodeToString(sum[:])}
	raw, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	l := statestore.Link{
		Index: cs.keys.Runs(scope), Field: run.JobID, Entry: raw,
		Value: cs.keys.RunCode(scope, entry.CodeSHA256), TTL: cs.cfg.RunRetention, Quota: cs.quota(scope),
	}
	err = cs.link(ctx, l, code)
	for attempt := 0; errors.Is(err, statestore.ErrOverQuota) && attempt < maxRoomAttempts; attempt++ {
		var qe *statestore.QuotaError
		errors.As(err, &qe)
		dropped, perr := cs.pruneForRoom(ctx, scope, qe.Used+qe.Adding-qe.Limit)
		if perr != nil {
			return perr
		}
		if !dropped {
			break
		}
		err = cs.link(ctx, l, code)
	}
	if err != nil {
		return cs.storageError(err, "the run's code was not recorded")
	}
	cs.touchScope(ctx, scope)
	n, err := cs.st.HLen(ctx, cs.keys.Runs(scope))
	if err != nil || n <= int64(cs.cfg.RunHistory) {
		return err
	}
	// One prune of a scope at a time: the session's other calls that cross
	// the history meanwhile would read the same index and drop the same
	// runs (with 8 callers, 8 reads of a thousand entries each, every
	// RunHistory/10 runs); the runs they add are dropped by the next one.
	if _, busy := cs.pruning.LoadOrStore(scope, struct{}{}); busy {
		return nil
	}
	defer cs.pruning.Delete(scope)
	return cs.pruneRuns(ctx, scope, max(cs.cfg.RunHistory-cs.cfg.RunHistory/10, 1))
}

// link links l, sending code only when the store does not hold it already.
func (cs *CodeStore) link(ctx context.Context, l statestore.Link, code string) error {
	_, err := cs.st.Link(ctx, l, nil)
	if errors.Is(err, statestore.ErrNeedData) {
		_, err = cs.st.Link(ctx, l, []byte(code))
	}
	return err
}

// pruneRuns keeps the newest keep runs of scope (fewer if some have passed
// their retention) and drops the rest. Concurrent pruners drop the same runs.
func (cs *CodeStore) pruneRuns(ctx context.Context, scope string, keep int) error {
	runs, expired, err := cs.loadRuns(ctx, scope)
	if err != nil {
		return err
	}
	if len(runs) > keep {
		for _, r := range runs[keep:] {
			expired = append(expired, r.JobID)
		}
	}
	return cs.dropRuns(ctx, scope, expired)
}

// pruneForRoom drops scope's runs past their retention and its oldest runs
// until dropping them frees at least need bytes of code (a code is freed
// with the last run that ran it). When dropping every run would not free
// need bytes (the code files take the room), it drops only the expired
// ones. It reports whether it dropped any.
func (cs *CodeStore) pruneForRoom(ctx context.Context, scope string, need int64) (bool, error) {
	runs, drop, err := cs.loadRuns(ctx, scope)
	if err != nil {
		return false, err
	}
	left := make(map[string]int, len(runs))
	var freeable int64
	for _, r := range runs {
		if left[r.CodeSHA256]++; left[r.CodeSHA256] == 1 && r.CodeSHA256 != "" {
			freeable += r.Size
		}
	}
	if freeable < need {
		runs = nil
	}
	var freed int64
	for i := len(runs) - 1; i >= 0 && freed < need; i-- {
		r := runs[i]
		drop = append(drop, r.JobID)
		if left[r.CodeSHA256]--; left[r.CodeSHA256] == 0 && r.CodeSHA256 != "" {
			freed += r.Size
		}
	}
	if len(drop) == 0 {
		return false, nil
	}
	cs.log.Info("dropping old runs to make room under the session's storage limit",
		"scope", scope, "runs", len(drop), "need_bytes", need, "limit_bytes", cs.cfg.MaxSessionBytes)
	return true, cs.dropRuns(ctx, scope, drop)
}

// dropRuns removes runs ids of scope from the index and their references
// to their code, which the store deletes with its last reference. Runs
// recorded before code was shared keep their own key, deleted here too.
func (cs *CodeStore) dropRuns(ctx context.Context, scope string, ids []string) error {
	const batch = 500
	for len(ids) > 0 {
		n := min(batch, len(ids))
		keys := make([]string, n)
		for i, id := range ids[:n] {
			keys[i] = cs.keys.Run(scope, id)
		}
		if err := cs.st.Unlink(ctx, cs.keys.Runs(scope), cs.quota(scope), ids[:n]...); err != nil {
			return err
		}
		if err := cs.st.Delete(ctx, keys...); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// Runs returns scope's recorded runs, newest first. Index entries past their
// retention are left out, and removed.
func (cs *CodeStore) Runs(ctx context.Context, scope string) ([]RunInfo, error) {
	entries, expired, err := cs.loadRuns(ctx, scope)
	if err != nil {
		return nil, err
	}
	if len(expired) > 0 {
		if err := cs.dropRuns(ctx, scope, expired); err != nil {
			cs.log.Warn("drop expired runs from the index", "scope", scope, "err", err)
		}
	}
	runs := make([]RunInfo, len(entries))
	for i, e := range entries {
		runs[i] = e.RunInfo
	}
	return runs, nil
}

// loadRuns reads scope's runs index: the live runs, newest first, and the
// ids of those past their retention (or unreadable).
func (cs *CodeStore) loadRuns(ctx context.Context, scope string) (runs []runEntry, expired []string, err error) {
	all, err := cs.st.HGetAll(ctx, cs.keys.Runs(scope))
	if err != nil {
		return nil, nil, err
	}
	cutoff := time.Now().Add(-cs.cfg.RunRetention)
	for id, raw := range all {
		var r runEntry
		if json.Unmarshal(raw, &r) != nil || r.JobID != id || r.Time.Before(cutoff) {
			expired = append(expired, id)
			continue
		}
		runs = append(runs, r)
	}
	// Job ids are ULIDs: their order is the order they were made in.
	slices.SortFunc(runs, func(a, b runEntry) int { return cmp.Compare(b.JobID, a.JobID) })
	return runs, expired, nil
}

// ReadRun returns the code job jobID of scope ran, or ErrRunNotFound (also
// for a malformed id, or one of another session).
func (cs *CodeStore) ReadRun(ctx context.Context, scope, jobID string) (string, RunInfo, error) {
	if _, err := ulid.ParseStrict(jobID); err != nil {
		return "", RunInfo{}, ErrRunNotFound
	}
	raw, err := cs.st.HGet(ctx, cs.keys.Runs(scope), jobID)
	if errors.Is(err, statestore.ErrNotFound) {
		return "", RunInfo{}, ErrRunNotFound
	}
	if err != nil {
		return "", RunInfo{}, err
	}
	var r runEntry
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", RunInfo{}, ErrRunNotFound
	}
	key := cs.keys.Run(scope, jobID)
	if r.CodeSHA256 != "" {
		key = cs.keys.RunCode(scope, r.CodeSHA256)
	}
	code, err := cs.st.Get(ctx, key)
	if errors.Is(err, statestore.ErrNotFound) {
		return "", RunInfo{}, ErrRunNotFound
	}
	if err != nil {
		return "", RunInfo{}, err
	}
	return string(code), r.RunInfo, nil
}

// Usage returns the bytes scope keeps in the store, as counted against
// MaxSessionBytes: its code files and the distinct code of its runs.
func (cs *CodeStore) Usage(ctx context.Context, scope string) (int64, error) {
	return statestore.Usage(ctx, cs.st, cs.quota(scope))
}

// quota is scope's storage budget, with the tenant's counter as its Outer
// when the store was given one: code-file writes charge both, the code of
// runs (Link, Unlink) only the session's.
func (cs *CodeStore) quota(scope string) statestore.Quota {
	q := statestore.Quota{Key: cs.keys.Usage(scope), Limit: cs.cfg.MaxSessionBytes}
	if cs.tenant.Key != "" {
		q.Outer = &cs.tenant
	}
	return q
}

// storageError turns a refusal of the session's budget into ErrStorageFull
// with the figures, and a refusal of the tenant's counter into
// ErrTenantFull; what says what the refusal left undone. Other errors pass
// unchanged.
func (cs *CodeStore) storageError(err error, what string) error {
	var qe *statestore.QuotaError
	if !errors.As(err, &qe) {
		return err
	}
	if cs.tenant.Key != "" && qe.Key == cs.tenant.Key {
		return fmt.Errorf("%w: %s: %w", ErrTenantFull, what, qe)
	}
	return fmt.Errorf("%w: the session keeps %d bytes (code files plus the code of recorded runs) "+
		"and the limit is %d bytes; this write needs %d more, so %s. delete_code_file frees space",
		ErrStorageFull, qe.Used, qe.Limit, qe.Adding, what)
}

func (cs *CodeStore) meta(ctx context.Context, scope, name string) fileMeta {
	var m fileMeta
	if raw, err := cs.st.HGet(ctx, cs.keys.CodeFiles(scope), name); err == nil {
		_ = json.Unmarshal(raw, &m)
	}
	return m
}

func (cs *CodeStore) putMeta(ctx context.Context, scope, name string, m fileMeta) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return cs.st.HSet(ctx, cs.keys.CodeFiles(scope), name, raw)
}

// scopeTouchEvery is how stale a scope's recorded last write may be before
// a write records it again: the time is read by collection, whose cutoffs
// are hours or days.
const scopeTouchEvery = time.Minute

// touchScope records that scope has state worth exporting, and when it last
// wrote. Best effort: a failure only hides the scope from `codexec export`.
// A time recorded within scopeTouchEvery is left as it is: a read instead
// of a write on every run (in `codexec dev`, a synced bbolt transaction
// fewer per call).
func (cs *CodeStore) touchScope(ctx context.Context, scope string) {
	now := time.Now()
	if v, err := cs.st.HGet(ctx, cs.keys.Scopes(), scope); err == nil {
		if ms, err := strconv.ParseInt(string(v), 10, 64); err == nil && now.Sub(time.UnixMilli(ms)).Abs() < scopeTouchEvery {
			return
		}
	}
	if err := cs.st.HSet(ctx, cs.keys.Scopes(), scope, fmt.Appendf(nil, "%d", now.UnixMilli())); err != nil {
		cs.log.Warn("record session scope", "scope", scope, "err", err)
	}
}

// mirrorPath is where the on-disk copy of name of scope lives, or "".
func (cs *CodeStore) mirrorPath(scope, name string) string {
	if cs.cfg.MirrorDir == "" {
		return ""
	}
	return filepath.Join(cs.cfg.MirrorDir, scope, "files", name)
}

// lockMirror locks the on-disk copy of name of scope and returns its
// unlock. One write of a file's copy at a time: each reads the copy's size
// and decides from it, and a whole rewrite (a rename) must not replace a
// copy that another write is extending.
func (cs *CodeStore) lockMirror(scope, name string) func() {
	h := fnv.New32a()
	h.Write([]byte(scope))
	h.Write([]byte{0})
	h.Write([]byte(name))
	mu := &cs.mirrorLocks[h.Sum32()%uint32(len(cs.mirrorLocks))]
	mu.Lock()
	return mu.Unlock
}

// mirror runs write on scope's on-disk files directory, when there is one,
// and records the outcome in info. A failure does not fail the call: the
// store has the content.
func (cs *CodeStore) mirror(scope string, info *FileInfo, write func(*safedir.Dir) error) {
	if cs.cfg.MirrorDir == "" {
		return
	}
	info.Path = cs.mirrorPath(scope, info.Name)
	defer cs.lockMirror(scope, info.Name)()
	d, err := safedir.Open(cs.cfg.MirrorDir, true, scope, "files")
	if err == nil {
		err = write(d)
		d.Close()
	}
	if err != nil {
		cs.log.Warn("write the on-disk copy of a code file", "scope", scope, "file", info.Name, "err", err)
		info.Warning = fmt.Sprintf("the on-disk copy at %s could not be written (%v); the file itself is stored", info.Path, err)
	}
}
