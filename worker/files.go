package worker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/limits"
	"golang.org/x/sys/unix"
)

// maxUpload is the largest file a files job writes.
const maxUpload = 16 << 20

// errNoFile is what a read of a file that is not there, or not a regular
// file of the working directory, says: the same words whatever the
// reason, so that nothing tells a missing file from a link or another
// session's name.
var errNoFile = errors.New(wire.NoFile)

// runFiles reads or writes one file of the session's working directory,
// in its session as an execution would (the directory restored when
// another worker saved it last, saved after a write). The path is checked
// again here, and resolved below the directory without following links.
func (w *Worker) runFiles(ctx context.Context, job *wire.Job, attempt int, log *slog.Logger) *wire.Result {
	op := job.File
	if op == nil || (op.Op != wire.FileRead && op.Op != wire.FileWrite) {
		return w.result(job, attempt, wire.StatusRejected, "a files job needs a read or a write")
	}
	if err := wire.CheckWorkspacePath(op.Path); err != nil {
		return w.result(job, attempt, wire.StatusRejected, err.Error())
	}
	set, err := limits.Resolve(w.cfg.Limits, w.cfg.MaxLimits, job.Limits)
	if err != nil {
		return w.result(job, attempt, wire.StatusRejected, err.Error())
	}
	cwd, _, uid, disk, err := w.sessionDirs(ctx, job.Scope)
	if err != nil {
		return w.result(job, attempt, wire.StatusInternal, "prepare session directory: "+err.Error())
	}
	defer w.releaseSession(job.Scope, disk)
	if err := disk.setLimit(set.Disk); err != nil {
		return w.result(job, attempt, wire.StatusInternal, "set the disk limit: "+err.Error())
	}
	ws, err := w.restoreWorkspace(ctx, job.Scope, cwd, uid, disk, set.Disk, job.KnownHolder, log)
	if err != nil {
		return w.restoreFailure(job, attempt, set.Disk, err)
	}
	started := time.Now().UTC()
	var data wire.FileData
	if op.Op == wire.FileRead {
		data, err = readBeneath(cwd, op.Path, op.Offset, op.Length)
	} else {
		data, err = w.writeUpload(cwd, op.Path, job.Code, uid, set.Disk, disk)
		if err == nil && w.confirmClaim(ctx, log) {
			w.saveWorkspace(ctx, ws, job.ID, cwd, log)
		}
		w.reportJobWorkdir(ctx, job, disk, cwd, log)
	}
	if err != nil {
		res := w.result(job, attempt, wire.StatusError, fmt.Sprintf("%s %s: %v", op.Op, op.Path, err))
		if errors.Is(err, errDiskFull) {
			res.Status, res.Limit = wire.StatusLimit, wire.LimitDisk
		}
		return res
	}
	res := w.result(job, attempt, wire.StatusOK, fmt.Sprintf("%s %s: %d bytes", op.Op, op.Path, max(len(data.Data), int(data.Size))))
	res.ExitCode, res.StartedAt = 0, started
	res.Data, _ = json.Marshal(data)
	return res
}

var errDiskFull = errors.New("the working directory's disk limit leaves no room for it")

// writeUpload writes the base64 content b64 to rel below cwd, making the
// directories on its way (the session's uid owns what is made).
func (w *Worker) writeUpload(cwd, rel, b64 string, uid int, limit int64, disk *sessionDisk) (wire.FileData, error) {
	content, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return wire.FileData{}, fmt.Errorf("the content is not base64: %w", err)
	}
	if len(content) > maxUpload {
		return wire.FileData{}, fmt.Errorf("%d bytes, more than the %d a file may have", len(content), maxUpload)
	}
	if disk == nil && limit > 0 && DiskUsage(cwd)+int64(len(content)) > limit {
		return wire.FileData{}, errDiskFull
	}
	f, err := openBeneath(cwd, rel, uid, unix.O_WRONLY|unix.O_CREAT|unix.O_NONBLOCK)
	if err != nil {
		return wire.FileData{}, err
	}
	defer f.Close()
	if err := f.Truncate(0); err != nil {
		return wire.FileData{}, err
	}
	if _, err := f.Write(content); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			err = errDiskFull
		}
		_ = f.Truncate(0)
		return wire.FileData{}, err
	}
	return wire.FileData{Path: rel, Size: int64(len(content))}, f.Close()
}

// readBeneath reads length bytes (0: MaxFileRead) from offset of the
// regular file rel below cwd.
func readBeneath(cwd, rel string, offset, length int64) (wire.FileData, error) {
	if offset < 0 || length < 0 {
		return wire.FileData{}, errors.New("offset and length must not be negative")
	}
	if length == 0 || length > wire.MaxFileRead {
		length = wire.MaxFileRead
	}
	f, err := openBeneath(cwd, rel, -1, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return wire.FileData{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return wire.FileData{}, err
	}
	data := wire.FileData{Path: rel, Size: fi.Size(), Offset: offset}
	if offset >= fi.Size() {
		return data, nil
	}
	buf := make([]byte, min(length, fi.Size()-offset))
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return wire.FileData{}, err
	}
	data.Data = buf[:n]
	return data, nil
}

// openBeneath opens the regular file rel below cwd with flags, never
// following a link, and refuses a file with other hard links (a write
// through one would reach a file elsewhere). uid >= 0 makes the missing
// directories on the way, as the session's; otherwise a missing one is
// errNoFile. Any failure to find a regular file there is errNoFile.
func openBeneath(cwd, rel string, uid int, flags int) (*os.File, error) {
	dir, err := unix.Open(cwd, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	dirs, name := splitDirs(rel)
	for _, p := range dirs {
		var next int
		if uid >= 0 {
			next, err = mkdirBeneath(dir, p, uid)
		} else {
			next, err = openDirBeneath(dir, p)
		}
		unix.Close(dir)
		if err != nil {
			return nil, errNoFile
		}
		dir = next
	}
	defer unix.Close(dir)
	how := &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: beneath}
	if flags&unix.O_CREAT != 0 {
		how.Mode = 0o600 // openat2 refuses a mode without O_CREAT
	}
	fd, err := unix.Openat2(dir, name, how)
	if err != nil {
		return nil, errNoFile
	}
	f := os.NewFile(uintptr(fd), rel)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink > 1 {
		f.Close()
		return nil, errNoFile
	}
	if uid >= 0 && int(st.Uid) != uid {
		if err := unix.Fchown(fd, uid, gidOf(uid)); err != nil && !errors.Is(err, unix.EPERM) {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// changedFiles lists the regular files below cwd changed since since
// (what an execution wrote), slash-separated, sorted (hidden ones last:
// byHiddenLast), at most wire.MaxChangedFiles, leaving out codexec's own
// directory (.codexec).
// The walk stops after maxWalk entries: a directory of many files pays
// a bounded cost per job, and the list may then miss some.
func changedFiles(cwd string, since time.Time) []string {
	out := allChangedFiles(cwd, "", since)
	if len(out) > wire.MaxChangedFiles {
		out = out[:wire.MaxChangedFiles]
	}
	return out
}

// allChangedFiles is changedFiles of the directory sub of cwd ("" for cwd
// itself), without its bound on the list's length, names relative to sub.
// The walk stays below cwd and follows no link: the job, whose directory
// it is, may have replaced any directory of sub by a link to a host path,
// which the worker, as root, would otherwise list. It reads directories a
// few entries at a time, breadth first, and stops after maxWalk entries:
// a directory is the job's, which may have put millions of names in it,
// and reading any directory whole (fs.WalkDir does, to sort it) once held
// every name in the worker's memory after each of the session's calls.
// Each directory is opened by its path from the top, one open per name
// of the path: the walk stops too once it has opened maxWalkOpens names,
// so that a chain of directories thousands deep, which a job makes in a
// second, costs no more than a tree of ordinary depth.
func allChangedFiles(cwd, sub string, since time.Time) []string {
	root, err := os.OpenRoot(cwd)
	if err != nil {
		return nil
	}
	defer root.Close()
	if sub != "" {
		d, err := rootBeneath(root, sub)
		if err != nil {
			return nil
		}
		defer d.Close()
		root = d
	}
	var out []string
	seen, opens := 0, 0
	queue := []string{"."}
	for len(queue) > 0 && seen < maxWalk {
		dir := queue[0]
		queue = queue[1:]
		if opens += strings.Count(dir, "/") + 1; opens > maxWalkOpens {
			break
		}
		f, err := root.Open(dir)
		if err != nil {
			continue
		}
		for seen < maxWalk {
			entries, err := f.ReadDir(min(readDirChunk, maxWalk-seen))
			for _, d := range entries {
				seen++
				p := path.Join(dir, d.Name())
				if wire.CheckWorkspacePath(p) != nil {
					continue // nothing below it would be a path either
				}
				if d.IsDir() {
					if p != ".codexec" {
						queue = append(queue, p)
					}
					continue
				}
				if !d.Type().IsRegular() {
					continue
				}
				if fi, err := d.Info(); err == nil && !changedAt(fi).Before(since) {
					out = append(out, p)
				}
			}
			if err != nil || len(entries) == 0 {
				break
			}
		}
		f.Close()
	}
	if hook := changedWalkOpened.Load(); hook != nil {
		(*hook)(cwd, opens)
	}
	slices.SortFunc(out, byHiddenLast)
	return out
}

// byHiddenLast orders paths by name, those with a hidden name (one that
// starts with a dot) after all others. A job's HOME is its working
// directory, so the caches its libraries keep there (.cache/matplotlib,
// a model hub's downloads) are files it changed; sorted by name alone
// they came first, and a list cut at its bound kept them and left out the
// job's own results.
func byHiddenLast(a, b string) int {
	if ha, hb := hiddenPath(a), hiddenPath(b); ha != hb {
		if ha {
			return 1
		}
		return -1
	}
	return strings.Compare(a, b)
}

// hiddenPath says whether a slash-separated path has a name that starts
// with a dot.
func hiddenPath(p string) bool {
	return strings.HasPrefix(p, ".") || strings.Contains(p, "/.")
}

// changedWalkOpened, when set (tests), is told how many names each walk of
// allChangedFiles opened on its way to the directories it read (the last
// one it counted but did not open included), with the walk's cwd.
var changedWalkOpened atomic.Pointer[func(cwd string, n int)]

// readDirChunk is how many entries a walk of a job's directory reads at
// once.
const readDirChunk = 256

// readNames returns the names of dir (a descriptor, left open) for which
// keep is true, among the first limit entries it holds: read a few at a
// time, so that a directory of millions of names, which a job can make,
// costs the worker no more than limit names.
func readNames(dir int, what string, limit int, keep func(string) bool) ([]string, error) {
	dup, err := unix.Dup(dir)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), what)
	defer f.Close()
	var names []string
	for seen := 0; seen < limit; {
		chunk, err := f.Readdirnames(min(readDirChunk, limit-seen))
		seen += len(chunk)
		for _, n := range chunk {
			if keep(n) {
				names = append(names, n)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(chunk) == 0) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return names, nil
}

// rootBeneath opens the directory rel (slash-separated) below root one
// name at a time, none of them a link.
func rootBeneath(root *os.Root, rel string) (*os.Root, error) {
	cur := root
	for _, name := range strings.Split(rel, "/") {
		fi, err := cur.Lstat(name)
		if err == nil && !fi.IsDir() {
			err = errNoFile
		}
		var next *os.Root
		if err == nil {
			next, err = cur.OpenRoot(name)
		}
		if cur != root {
			cur.Close()
		}
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// changedAt is when fi's inode last changed (its ctime, which the job
// cannot set back, unlike its modification time).
func changedAt(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	}
	return fi.ModTime()
}

// maxWalk bounds the entries changedFiles looks at.
const maxWalk = 4096

// maxWalkOpens bounds the names changedFiles opens on its way to the
// directories it reads: the sum of their depths. A job made a chain of
// directories 2,040 deep (paths of 4 KiB, within PATH_MAX), and the walk
// after each of its session's calls, which opened every directory from the
// top (2 million names looked up), cost the worker, as root and outside
// every job's limits, 0.28 s of CPU for each call of print(1), against
// under 0.01 s, and twice as much for two such chains.
const maxWalkOpens = 4 * maxWalk
