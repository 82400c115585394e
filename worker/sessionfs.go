package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/diskfs"
	"github.com/codexec/codexec/worker/workspace"
)

// A session's working directory is, where the worker can make one, the
// Work directory of a file system of its own (package diskfs): its image
// in DataDir/disks (out of every sandbox), mounted on the session's
// directory under the sessions root at its first call, unmounted once idle,
// the least recently used idle one first when too many are mounted. Each
// job sets the ballast for its own disk limit before it runs, and the
// kernel refuses a write past it: nothing to measure, nothing to outrun.
//
// A session's image is a copy of a template the worker makes once, at
// start and in the background, for its image size and its default disk
// limit (disks/.template-<size>-<limit>.img: an empty file system mounted
// once, its ballast set for that limit): copied by FICLONE or by
// copy_file_range of its data only, so that a session's first call pays
// for neither mkfs.ext4 nor the first fallocate of its ballast. Made by
// each worker at its start (a template left by another is removed, with a
// copy cut short), and removed when it stops, it is never older than the
// worker's mkfs.ext4 and settings. Where a copy fails, or a copy does not
// mount, the worker drops the template, says why, and makes images with
// mkfs.ext4 as without one.
//
// The sessions root is a shared mount (bound onto itself), so that a file
// system mounted there after the sandboxes started still reaches them:
// bubblewrap makes its mount namespace a slave of the host's, and each
// job's process makes its own a slave of its zygote's (zygote.py).

// sessionFS is the sessions' file systems of a worker.
type sessionFS struct {
	root, images string
	size         int64
	limit        int64 // the default disk limit, the template's
	max          int
	idle         time.Duration
	log          *slog.Logger
	// dropped is told of a session whose image dropReadOnly removed.
	dropped func(scope string) error

	tmplPath  string        // the template image
	tmplReady chan struct{} // closed once the template is made, or not
	tmplMu    sync.Mutex
	tmplOK    bool // made, and not dropped

	scopes scopeLocks // one mount or unmount of a session at a time
	mu     sync.Mutex
	disks  map[string]*sessionDisk // mounted
	legacy map[string]bool         // sessions with a plain directory, said once
	stop   chan struct{}
	done   chan struct{}
}

// sessionDisk is a session's mounted file system; nil for a session whose
// directory is measured instead (no session file systems, or a plain
// directory from before them).
type sessionDisk struct {
	fs    *diskfs.FS
	users int       // jobs between acquire and release
	last  time.Time // when the last one was released
}

// setupSessionFS decides, once, whether this worker's sessions get file
// systems of their own (Config.SessionFS): it needs root, loop devices and
// mkfs.ext4, and proves them by making, mounting and removing a small one.
// Without them the disk limit is measured (watchDisk), and the worker says
// why.
func (w *Worker) setupSessionFS(ctx context.Context) {
	if w.cfg.SessionFS == SessionFSOff {
		w.log.Warn("session file systems off (--session-fs off): the disk limit is measured every 100 ms, and a fast writer can pass it between two samples")
		return
	}
	s, err := newSessionFS(ctx, w.cfg, w.sessionsRoot(), w.log)
	if err != nil {
		w.log.Warn("no session file systems: the disk limit is measured every 100 ms, and a fast writer can pass it between two samples", "reason", err)
		return
	}
	s.dropped = w.forgetCopy
	w.sessionFS = s
	w.log.Info("session file systems ready: the kernel enforces the disk limit", "size", s.size, "max_mounted", s.max, "idle", s.idle)
}

// newSessionFS probes diskfs, unmounts what a worker that died left mounted
// under root, makes root a shared mount and starts the idle sweep.
func newSessionFS(ctx context.Context, cfg Config, root string, log *slog.Logger) (*sessionFS, error) {
	if err := diskfs.Check(); err != nil {
		return nil, err
	}
	root, err := filepath.EvalSymlinks(root)
	if err == nil {
		root, err = filepath.Abs(root)
	}
	if err != nil {
		return nil, err
	}
	s := &sessionFS{
		root: root, images: filepath.Join(cfg.DataDir, "disks"), size: cfg.SessionFSSize,
		limit: cfg.Limits.Disk, max: cfg.SessionFSMounted, idle: cfg.SessionFSIdle, log: log,
		disks: map[string]*sessionDisk{}, legacy: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{}), tmplReady: make(chan struct{}),
	}
	s.tmplPath = filepath.Join(s.images, fmt.Sprintf(".template-%d-%d.img", s.size, s.limit))
	if err := os.MkdirAll(s.images, 0o700); err != nil {
		return nil, err
	}
	if err := s.probe(ctx); err != nil {
		return nil, err
	}
	if err := s.removeTemplates(); err != nil {
		return nil, err
	}
	if err := unmountUnder(root); err != nil {
		return nil, err
	}
	if err := shareRoot(root); err != nil {
		return nil, err
	}
	go s.makeTemplate()
	go s.sweepLoop()
	return s, nil
}

// templateDir is where the template is mounted while it is made.
func (s *sessionFS) templateDir() string { return filepath.Join(s.images, ".template") }

// removeTemplates removes what a worker left of its template: the images
// (of any size and limit), the mount of one being made when it died, the
// copies cut short, and the images mkfs.ext4 was making (diskfs.Create).
func (s *sessionFS) removeTemplates() error {
	dir := s.templateDir()
	if mp, err := diskfs.IsMountPoint(dir); err != nil {
		return err
	} else if mp {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	for _, pattern := range []string{".template-*.img", ".*.clone", "*.img.mkfs"} {
		stale, _ := filepath.Glob(filepath.Join(s.images, pattern))
		for _, p := range stale {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// makeTemplate makes the template, and says when it cannot.
func (s *sessionFS) makeTemplate() {
	defer close(s.tmplReady)
	dir := s.templateDir()
	err := os.MkdirAll(dir, 0o700)
	defer os.Remove(dir)
	if err == nil {
		err = diskfs.MakeTemplate(context.Background(), s.tmplPath, dir, s.size, s.limit)
	}
	if err != nil {
		s.log.Warn("no template for the sessions' file systems: each is made with mkfs.ext4", "err", err)
		return
	}
	s.tmplMu.Lock()
	s.tmplOK = true
	s.tmplMu.Unlock()
}

// template is the template's path once it is made, "" for none.
func (s *sessionFS) template(ctx context.Context) string {
	select {
	case <-s.tmplReady:
	case <-ctx.Done():
		return ""
	}
	s.tmplMu.Lock()
	defer s.tmplMu.Unlock()
	if !s.tmplOK {
		return ""
	}
	return s.tmplPath
}

// dropTemplate stops the use of the template (a copy failed, or did not
// mount), and says why.
func (s *sessionFS) dropTemplate(scope string, err error) {
	s.tmplMu.Lock()
	ok := s.tmplOK
	s.tmplOK = false
	s.tmplMu.Unlock()
	if ok {
		s.log.Warn("template of the sessions' file systems dropped: each is made with mkfs.ext4 from now on", "scope", scope, "err", err)
		os.Remove(s.tmplPath)
	}
}

// makeImage makes scope's image, a copy of the template where there is
// one, and reports whether it is.
func (s *sessionFS) makeImage(ctx context.Context, scope, image string) (cloned bool, err error) {
	if tmpl := s.template(ctx); tmpl != "" {
		// Copied beside it, then renamed: a copy cut short (the worker
		// killed) is never taken for the session's image.
		tmp := filepath.Join(s.images, "."+scope+".clone")
		os.Remove(tmp)
		err := diskfs.Clone(tmpl, tmp)
		if err == nil {
			if err = os.Rename(tmp, image); err == nil {
				return true, nil
			}
			os.Remove(tmp)
		}
		s.dropTemplate(scope, err)
	}
	return false, diskfs.Create(ctx, image, s.size)
}

// probe makes, mounts and removes a small file system: Check finds the
// tools, not whether this kernel (or container) lets them work.
func (s *sessionFS) probe(ctx context.Context) error {
	image, dir := filepath.Join(s.images, ".probe.img"), filepath.Join(s.images, ".probe")
	os.Remove(image)
	defer os.Remove(image)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := diskfs.Create(ctx, image, 16<<20); err != nil {
		return err
	}
	f, err := diskfs.Mount(image, dir)
	if err != nil {
		return err
	}
	return f.Unmount()
}

// unmountUnder unmounts what is mounted below root (a worker that died left
// its sessions' file systems mounted).
func unmountUnder(root string) error {
	mounts, err := diskfs.MountsUnder(root)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	return nil
}

// shareRoot makes root a mount point of its own (bound onto itself, unless
// it is one already) with shared propagation.
func shareRoot(root string) error {
	mp, err := diskfs.IsMountPoint(root)
	if err != nil {
		return err
	}
	if !mp {
		if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", root, err)
		}
	}
	if err := unix.Mount("", root, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", root, err)
	}
	return nil
}

// acquire mounts scope's file system, unless it is mounted, and counts a
// job on it until release. It returns nil (and no error) for a session
// whose directory is a plain one, from a worker that had no session file
// systems: that session keeps it, measured, rather than have its files
// moved under a limit they might not fit.
func (s *sessionFS) acquire(ctx context.Context, scope string) (*sessionDisk, error) {
	defer s.scopes.lock(scope)()
	s.mu.Lock()
	if d := s.disks[scope]; d != nil {
		if d.users > 0 || !d.fs.ReadOnly() {
			d.users++
			s.mu.Unlock()
			return d, nil
		}
		s.mu.Unlock()
		if err := s.dropReadOnly(scope, d.fs); err != nil {
			return nil, err
		}
		s.mu.Lock()
		delete(s.disks, scope)
		s.mu.Unlock()
	} else {
		s.mu.Unlock()
	}
	dir := filepath.Join(s.root, scope)
	if plain, err := plainDir(dir); err != nil || plain {
		if plain {
			s.sayLegacy(scope)
		}
		return nil, err
	}
	s.makeRoom()
	f, err := s.mount(ctx, scope, dir)
	if err == nil && f.ReadOnly() {
		// Mounted read-only (errors=remount-ro, at the mount): dropped
		// too, and made again.
		if err = s.dropReadOnly(scope, f); err == nil {
			f, err = s.mount(ctx, scope, dir)
		}
	}
	if err != nil {
		return nil, err
	}
	d := &sessionDisk{fs: f, users: 1}
	s.mu.Lock()
	s.disks[scope] = d
	s.mu.Unlock()
	return d, nil
}

// dropReadOnly unmounts scope's read-only file system f (diskfs.FS.ReadOnly:
// the kernel made it so after a write its image could not take, the disk
// under DataDir full when the page cache was written back, or an I/O error;
// every job of the session would fail on it, even once the disk has room)
// and removes its image, so that the session's next mount makes a new one,
// and tells the
// worker (dropped) that its copy of the session's files is gone: the next
// job restores the session's last saved snapshot, which holds what the jobs
// wrote up to their last save (a snapshot is read through the page cache,
// writes the image lost included).
func (s *sessionFS) dropReadOnly(scope string, f *diskfs.FS) error {
	s.log.Error("a session's file system went read-only (its image could not be written: the data directory's disk full, "+
		"or an I/O error); its image is dropped and the session's files are restored from its last saved snapshot", "scope", scope)
	// Forgotten first: a copy still remembered would be taken, empty,
	// for the session's files, and saved over its snapshot.
	if s.dropped != nil {
		if err := s.dropped(scope); err != nil {
			return fmt.Errorf("its file system went read-only, and the worker could not forget its copy: %w", err)
		}
	}
	if err := f.Unmount(); err != nil {
		return err
	}
	image := filepath.Join(s.images, scope+".img")
	// Its loop device goes with the unmount, asynchronously: the image
	// is removed all the same (the device holds it open until then).
	if err := os.Remove(image); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// plainDir says whether dir is a directory with files that is not a mount
// point: a session's directory from before session file systems.
func plainDir(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || err == nil && len(entries) == 0 {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	mp, err := diskfs.IsMountPoint(dir)
	return !mp, err
}

func (s *sessionFS) sayLegacy(scope string) {
	s.mu.Lock()
	said := s.legacy[scope]
	s.legacy[scope] = true
	s.mu.Unlock()
	if !said {
		s.log.Warn("session directory from before session file systems: its disk limit stays measured", "scope", scope)
	}
}

// mount makes scope's image if it has none, and mounts it on dir. An image
// still attached from an unmount that had to wait for its last user is
// waited for, a little.
func (s *sessionFS) mount(ctx context.Context, scope, dir string) (*diskfs.FS, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	image := filepath.Join(s.images, scope+".img")
	cloned := false
	if _, err := os.Lstat(image); errors.Is(err, os.ErrNotExist) {
		if cloned, err = s.makeImage(ctx, scope, image); err != nil {
			return nil, err
		}
	}
	for i := 0; ; i++ {
		f, err := diskfs.Mount(image, dir)
		if err != nil && cloned && !errors.Is(err, diskfs.ErrInUse) {
			// A copy of the template that does not mount holds no file
			// of the session's yet: made again with mkfs.ext4.
			s.dropTemplate(scope, err)
			cloned = false
			if err = os.Remove(image); err == nil {
				err = diskfs.Create(ctx, image, s.size)
			}
			if err == nil {
				f, err = diskfs.Mount(image, dir)
			}
		}
		if err == nil {
			// Passable, not listable, like the sessions root: the job's
			// uid goes through to its Work directory.
			if err := os.Chmod(dir, 0o711); err != nil {
				_ = f.Unmount()
				return nil, err
			}
		}
		if !errors.Is(err, diskfs.ErrInUse) || i == 20 {
			return f, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// release ends a job's use of d (nil: none).
func (s *sessionFS) release(d *sessionDisk) {
	if d == nil {
		return
	}
	s.mu.Lock()
	d.users--
	d.last = time.Now()
	s.mu.Unlock()
}

// makeRoom unmounts the least recently used idle file systems while as
// many as max are mounted. Those of sessions being mounted or unmounted
// are passed over; with every one in use, the count goes past max (by at
// most the worker's concurrency).
func (s *sessionFS) makeRoom() {
	for {
		s.mu.Lock()
		if len(s.disks) < s.max {
			s.mu.Unlock()
			return
		}
		victim := ""
		for scope, d := range s.disks {
			if d.users == 0 && (victim == "" || d.last.Before(s.disks[victim].last)) {
				victim = scope
			}
		}
		s.mu.Unlock()
		if victim == "" || !s.unmount(victim, time.Time{}) {
			return
		}
	}
}

// unmount unmounts scope's file system when no job uses it and it has
// been idle since before idleSince (zero: however recently). It reports
// whether it did.
func (s *sessionFS) unmount(scope string, idleSince time.Time) bool {
	unlock, ok := s.scopes.tryLock(scope)
	if !ok {
		return false
	}
	defer unlock()
	s.mu.Lock()
	d := s.disks[scope]
	if d == nil || d.users > 0 || !idleSince.IsZero() && d.last.After(idleSince) {
		s.mu.Unlock()
		return false
	}
	delete(s.disks, scope)
	s.mu.Unlock()
	if err := d.fs.Unmount(); err != nil {
		s.log.Warn("session file system not unmounted", "scope", scope, "err", err)
	}
	return true
}

// sweep unmounts the file systems idle for s.idle.
func (s *sessionFS) sweep(now time.Time) {
	s.mu.Lock()
	var idle []string
	for scope, d := range s.disks {
		if d.users == 0 && now.Sub(d.last) >= s.idle {
			idle = append(idle, scope)
		}
	}
	s.mu.Unlock()
	for _, scope := range idle {
		s.unmount(scope, now.Add(-s.idle))
	}
}

func (s *sessionFS) sweepLoop() {
	defer close(s.done)
	t := time.NewTicker(max(time.Second, min(s.idle/4, time.Minute)))
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.sweep(now)
		}
	}
}

// close stops the sweep and unmounts every file system, then the sessions
// root's own bind: jobs are over.
func (s *sessionFS) close() {
	close(s.stop)
	<-s.done
	<-s.tmplReady
	s.tmplMu.Lock()
	s.tmplOK = false
	s.tmplMu.Unlock()
	if err := os.Remove(s.tmplPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("template of the sessions' file systems not removed", "err", err)
	}
	s.mu.Lock()
	disks := s.disks
	s.disks = map[string]*sessionDisk{}
	s.mu.Unlock()
	for scope, d := range disks {
		if err := d.fs.Unmount(); err != nil {
			s.log.Warn("session file system not unmounted", "scope", scope, "err", err)
		}
	}
	if err := unmountUnder(s.root); err != nil {
		s.log.Warn("session file systems not unmounted", "err", err)
	}
	if err := unix.Unmount(s.root, unix.MNT_DETACH); err != nil {
		s.log.Warn("sessions root not unmounted", "err", err)
	}
}

// tryLock locks scope's mutex unless it is held, and returns its unlock.
func (l *scopeLocks) tryLock(scope string) (func(), bool) {
	v, _ := l.m.LoadOrStore(scope, new(sync.Mutex))
	mu := v.(*sync.Mutex)
	if !mu.TryLock() {
		return nil, false
	}
	return mu.Unlock, true
}

// setLimit gives the job's part of d the job's disk limit (0: all of the
// file system). Nothing to do for a measured session (nil).
func (d *sessionDisk) setLimit(limit int64) error {
	if d == nil {
		return nil
	}
	return d.fs.SetLimit(limit)
}

// usage is what the session's files take: the file system's count (statfs)
// for a session file system, a walk of dir otherwise.
func (d *sessionDisk) usage(dir string) int64 {
	if d == nil {
		return DiskUsage(dir)
	}
	n, err := d.fs.Usage()
	if err != nil {
		return DiskUsage(dir)
	}
	return n
}

// full says whether the job's part of d has no more room than a write of
// a few blocks needs: a job that failed then, failed on its disk limit.
func (d *sessionDisk) full() bool {
	avail, err := d.fs.Avail()
	return err == nil && avail <= diskFullSlack
}

// fullFunc is full, for runFacts; nil for a measured session.
func (d *sessionDisk) fullFunc() func() bool {
	if d == nil {
		return nil
	}
	return d.full
}

// restoreFailure is the result of a job whose session's files could not be
// restored before it: files that do not fit the call's disk limit (the
// snapshot holds more, or the file system refused them) are the limit's,
// with what to do; anything else is the worker's failure.
func (w *Worker) restoreFailure(job *wire.Job, attempt int, limit int64, err error) *wire.Result {
	if fu := (*filesUnreachable)(nil); errors.As(err, &fu) {
		return w.result(job, attempt, wire.StatusInternal, fu.Error())
	}
	if limit > 0 && (errors.Is(err, unix.ENOSPC) || errors.Is(err, workspace.ErrTooLarge)) {
		res := w.result(job, attempt, wire.StatusLimit, fmt.Sprintf(
			"disk limit reached (%s in the working directory): the session's files, restored from their snapshot, do not fit it; call again with a larger disk_mb", mib(limit)))
		res.Limit = wire.LimitDisk
		return res
	}
	return w.result(job, attempt, wire.StatusInternal, "restore the session's files: "+err.Error())
}

// diskFullSlack is the room under which a session's file system counts as
// full. ext4 fills what room there is with small writes and fallocate, to
// the block; a large buffered write fails whole once less than it is left
// (a loop of 1 MiB writes stops with 253 blocks free), so a job that failed
// with up to a MiB free had its writes refused.
const diskFullSlack = 1<<20 + 64<<10
