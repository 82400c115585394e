package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/diskfs"
)

// needSessionFS skips the test where session file systems cannot be made
// (not root, no loop devices, no mkfs.ext4), with the reason; with CI=true
// it fails.
func needSessionFS(t *testing.T) {
	t.Helper()
	if err := diskfs.Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs loop devices and mkfs.ext4 as root: %v", err)
		}
		t.Skip(err)
	}
}

// startDiskWorker starts a worker of exec mode mode whose jobs' disk limit
// is limit.
func startDiskWorker(t *testing.T, fx *lifecycleFixture, mode string) *Worker {
	t.Helper()
	w, err := New(Config{
		ID: "disk-" + mode, DataDir: filepath.Join(fx.dataDir, mode), Sandbox: testSandbox(t),
		UIDDir: filepath.Join(fx.dataDir, "uids"), ExecMode: mode,
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	// Start's context is the consumer's: it lives as long as the worker.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// runDiskJob runs code in scope under a disk limit and returns its result.
func runDiskJob(t *testing.T, fx *lifecycleFixture, scope, code string, limitMB int64) *wire.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	job := &wire.Job{
		ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
		Code: code, Filename: "main.py", TimeoutMS: 60000, Deadline: time.Now().Add(time.Minute).UTC(),
		Limits: &wire.Limits{DiskMB: limitMB},
	}
	if err := fx.broker.PublishJob(ctx, job); err != nil {
		t.Fatal(err)
	}
	res, err := fx.broker.WaitResult(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The kernel, not a sample, holds the disk limit: the 760 MiB fallocate
// attack is refused with ENOSPC at the first file that would pass 20 MiB,
// as the job itself sees (a sampled limit let it reserve all 760 MiB
// before the watch killed it), in a session's first job (its file system
// mounted after the interpreters started) and in the next, in zygote and
// spawn mode alike. A job that hides the ENOSPC it got (exits 3, says
// nothing) still ends on the disk limit.
func TestDiskLimitHeldByTheKernel(t *testing.T) {
	needSessionFS(t)
	fx := newLifecycleFixture(t)
	const limit = 20
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		t.Run(mode, func(t *testing.T) {
			w := startDiskWorker(t, fx, mode)
			if w.sessionFS == nil {
				t.Fatal("the worker has no session file systems where diskfs works")
			}
			// A first job, elsewhere, warms the interpreters: the next
			// ones come from interpreters (and spares) started before
			// their session's file system was mounted.
			for range 2 {
				if res := runDiskJob(t, fx, "warm-"+mode, "print('warm')", limit); res.Status != wire.StatusOK {
					t.Fatalf("warm-up job: %s: %s %s", res.Status, res.Message, res.Stderr)
				}
			}
			scope := "kernel-" + mode
			for i := range 2 {
				res := runDiskJob(t, fx, scope, reportingFallocate, limit)
				if res.Status != wire.StatusLimit || res.Limit != wire.LimitDisk {
					t.Errorf("job %d: status %s, limit %q, want limit %q: %s", i, res.Status, res.Limit, wire.LimitDisk, res.Message)
				}
				if !strings.Contains(res.Stdout, "refused ENOSPC after 19 MiB") {
					t.Errorf("job %d: the kernel did not refuse the write past %d MiB at it:\nstdout %q\nstderr %q", i, limit, res.Stdout, clipEnd(res.Stderr))
				}
				work := filepath.Join(w.sessionsRoot(), scope, diskfs.Work)
				if du := DiskUsage(work); du > limit<<20 {
					t.Errorf("job %d: the workspace holds %d MiB, over its %d MiB limit", i, du>>20, limit)
				}
			}
			res := runDiskJob(t, fx, scope+"-quiet", quietWriter, limit)
			if res.Status != wire.StatusLimit || res.Limit != wire.LimitDisk {
				t.Errorf("a job that hides its ENOSPC: status %s, limit %q, want limit %q: %s\nstdout %q", res.Status, res.Limit, wire.LimitDisk, res.Message, res.Stdout)
			}
			if !strings.Contains(res.Stdout, "wrote ") {
				t.Errorf("the quiet writer wrote nothing: %q", res.Stdout)
			}
		})
	}
}

// reportingFallocate is the fallocate attack, saying how far it got.
const reportingFallocate = `import errno, os
total = 0
try:
    for i in range(40):
        fd = os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o600)
        os.posix_fallocate(fd, 0, 19 << 20)
        os.close(fd)
        total += 19
        print('reserved %d MiB' % total, flush=True)
except OSError as e:
    print('refused %s after %d MiB' % (errno.errorcode.get(e.errno), total), flush=True)
    raise
`

// quietWriter writes until the disk refuses, then exits 3 without a word
// about why.
const quietWriter = `import os
n = 0
try:
    with open('fill', 'wb') as f:
        while True:
            f.write(b'x' * (64 << 10))
            f.flush()
            n += 64 << 10
except OSError:
    pass
print('wrote %d MiB' % (n >> 20), flush=True)
os._exit(3)
`

func clipEnd(s string) string { return s[max(0, len(s)-400):] }

// The sessions' file systems of a worker: mounted at a session's first
// use, at most max at once (the least recently used idle one unmounted to
// make room, never one in use), unmounted once idle, all unmounted at
// close; a plain directory from before them kept, measured; and what a
// worker that died left mounted is unmounted by the next one's start.
func TestSessionFSMountsBoundedAndIdle(t *testing.T) {
	needSessionFS(t)
	data := t.TempDir()
	root := filepath.Join(data, "sessions")
	if err := os.MkdirAll(filepath.Join(root, "legacy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "legacy", "old.txt"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: data, SessionFSSize: 64 << 20, SessionFSMounted: 2, SessionFSIdle: time.Hour}
	ctx := context.Background()
	s, err := newSessionFS(ctx, cfg, root, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.close()
		}
	})
	mounted := func(scope string) bool {
		mp, err := diskfs.IsMountPoint(filepath.Join(s.root, scope))
		if err != nil {
			t.Fatal(err)
		}
		return mp
	}
	if d, err := s.acquire(ctx, "legacy"); err != nil || d != nil {
		t.Fatalf("a plain session directory: %v, %v; want it kept, measured (nil)", d, err)
	}
	a, err := s.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	s.release(b)
	// Two mounted, the bound: c makes room by unmounting b (idle), not a.
	c, err := s.acquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if !mounted("a") || mounted("b") || !mounted("c") {
		t.Errorf("after c: a %v, b %v, c %v mounted; want a and c", mounted("a"), mounted("b"), mounted("c"))
	}
	// Idle: released an hour ago by the sweep's clock.
	s.release(a)
	s.release(c)
	s.sweep(time.Now().Add(2 * time.Hour))
	if mounted("a") || mounted("c") {
		t.Errorf("idle file systems still mounted after the sweep: a %v, c %v", mounted("a"), mounted("c"))
	}
	// A session comes back to its files.
	if err := os.WriteFile(filepath.Join(s.root, "a", diskfs.Work, "f"), nil, 0o600); err == nil {
		t.Fatal("wrote into an unmounted session's directory")
	}
	a, err = s.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.root, "a", diskfs.Work, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.release(a)
	// A worker that dies leaves a mounted: the next one unmounts it at
	// its start, then mounts it again, files and all.
	close(s.stop)
	<-s.done
	s2, err := newSessionFS(ctx, cfg, root, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s = s2
	if mounted("a") {
		t.Error("a stale mount survived the start")
	}
	a, err = s.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(s.root, "a", diskfs.Work, "f")); err != nil || string(data) != "x" {
		t.Errorf("a's file after a new mount: %q, %v", data, err)
	}
	s.release(a)
	s.close()
	closed = true
	if under, err := diskfs.MountsUnder(filepath.Dir(root)); err != nil || len(under) != 0 {
		t.Errorf("mounted after close: %v, %v", under, err)
	}
	if data, err := os.ReadFile(filepath.Join(root, "legacy", "old.txt")); err != nil || string(data) != "kept" {
		t.Errorf("the plain directory's file: %q, %v", data, err)
	}
}

// fsUUID is the UUID in the superblock of the ext4 image at path.
func fsUUID(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	uuid := make([]byte, 16)
	if _, err := f.ReadAt(uuid, 1024+0x68); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", uuid)
}

// A session's image is a copy of the worker's template: same file system
// (its UUID), its ballast already set for the default disk limit, to the
// block, before any job sets it. A template that no longer gives an image
// that mounts is dropped, and the session's image made with mkfs.ext4. A
// worker removes what another left of its templates when it starts, and
// its own when it stops.
func TestSessionImagesClonedFromTheTemplate(t *testing.T) {
	needSessionFS(t)
	data := t.TempDir()
	root := filepath.Join(data, "sessions")
	disks := filepath.Join(data, "disks")
	for _, d := range []string{root, disks} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	stale := []string{filepath.Join(disks, ".template-1-2.img"), filepath.Join(disks, ".gone.clone")}
	for _, p := range stale {
		if err := os.WriteFile(p, []byte("left by a worker that died"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 20 << 20
	cfg := Config{DataDir: data, SessionFSSize: 1 << 30, SessionFSMounted: 8, SessionFSIdle: time.Hour}
	cfg.Limits.Disk = limit
	ctx := context.Background()
	s, err := newSessionFS(ctx, cfg, root, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			s.close()
		}
	})
	for _, p := range stale {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s, left by another worker, is still there: %v", filepath.Base(p), err)
		}
	}
	tmpl := s.template(ctx)
	if tmpl == "" {
		t.Fatal("no template")
	}
	a, err := s.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fsUUID(t, filepath.Join(disks, "a.img")), fsUUID(t, tmpl); got != want {
		t.Errorf("the session's file system %s, the template's %s: not a copy", got, want)
	}
	used, _ := a.fs.Usage()
	avail, _ := a.fs.Avail()
	if used+avail != limit {
		t.Errorf("a new session's file system, before any limit is set: %d KiB used, %d KiB free; want the default %d KiB in all",
			used>>10, avail>>10, limit>>10)
	}

	// A template whose copies do not mount: its superblock gone.
	f, err := os.OpenFile(tmpl, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	b, err := s.acquire(ctx, "b")
	if err != nil {
		t.Fatalf("a session whose copy of the template did not mount: %v", err)
	}
	if err := os.WriteFile(filepath.Join(b.fs.Work(), "f"), []byte("x"), 0o600); err != nil {
		t.Error(err)
	}
	if s.template(ctx) != "" {
		t.Error("the template is still used after a copy that did not mount")
	}
	if _, err := os.Stat(tmpl); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dropped template is still there: %v", err)
	}

	// A template again at the next start; none once it stops.
	s.release(a)
	s.release(b)
	s.close()
	closed = true
	s, err = newSessionFS(ctx, cfg, root, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	closed = false
	if s.template(ctx) != tmpl {
		t.Errorf("no template at the next start")
	}
	s.close()
	closed = true
	if left, _ := filepath.Glob(filepath.Join(disks, ".*")); len(left) != 0 {
		t.Errorf("left in disks/ after the stop: %v", left)
	}
}

// sessionWork is where w keeps scope's working directory: the Work
// directory of its file system (beside it, the ballast), or the session's
// directory itself.
func sessionWork(w *Worker, scope string) string {
	dir := filepath.Join(w.sessionsRoot(), scope)
	if w.sessionFS != nil {
		dir = filepath.Join(dir, diskfs.Work)
	}
	return dir
}

// A snapshot restored into a session's file system is held to the call's
// limit too: files whose bytes fit 20 MiB but whose blocks do not (19 MiB
// and 400 one-byte files, a block each) are refused by the kernel, and the
// job ends on the disk limit with what to do, not with an internal error
// or a workspace over its limit (not even by the block of a file the
// restore could not write). So is one restored over an older copy that
// held more than the call's limit: the limit is set again once the restore
// has cleared that copy (set over it, the limit left the restore every
// block the clear freed: 19 MiB and 400 blocks were restored under 20 MiB,
// 21,072 KiB, and the job ended ok).
func TestRestoreHeldToTheDiskLimit(t *testing.T) {
	needSessionFS(t)
	fx := newLifecycleFixture(t)
	start := func(id string) *Worker {
		w, err := New(Config{
			ID: id, DataDir: filepath.Join(fx.dataDir, id), Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"),
			Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
		}, fx.broker, fx.store)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })
		return w
	}
	a, b := start("restore-a"), start("restore-b")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(w *Worker, scope, code string, diskMB int64) *wire.Result {
		t.Helper()
		job := &wire.Job{
			ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
			Code: code, Filename: "main.py", TimeoutMS: 30000, Deadline: time.Now().Add(time.Minute).UTC(),
			Limits: &wire.Limits{DiskMB: diskMB},
		}
		if err := fx.broker.PublishJob(ctx, job, broker.ToWorker(w.ID())); err != nil {
			t.Fatal(err)
		}
		res, err := fx.broker.WaitResult(ctx, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	write := `with open('big', 'wb') as f:
    f.write(b'x' * (19 << 20))
for i in range(400):
    with open('small-%d' % i, 'wb') as f:
        f.write(b'y')
print('written')`
	const scope = "restore-limit"
	if res := run(a, scope, write, 30); res.Status != wire.StatusOK {
		t.Fatalf("writing on %s: %s %s %q", a.ID(), res.Status, res.Message, res.Stderr)
	}
	res := run(b, scope, "print('restored')", 20)
	if res.Status != wire.StatusLimit || res.Limit != wire.LimitDisk || !strings.Contains(res.Message, "restored from their snapshot") {
		t.Errorf("restoring 19 MiB and 400 blocks under 20 MiB: status %s, limit %q: %s; want the disk limit, the snapshot named", res.Status, res.Limit, res.Message)
	}
	if du := DiskUsage(sessionWork(b, scope)); du > 20<<20 {
		t.Errorf("the restored workspace takes %d KiB, over its 20 MiB limit", du>>10)
	}

	// b holds 25 MiB of the session; a cuts it to 19 MiB and 400 blocks;
	// b restores that under 20 MiB.
	const over = "restore-over"
	for _, step := range []struct {
		w    *Worker
		code string
	}{
		{b, "open('old', 'wb').write(b'x' * (25 << 20))"},
		{a, "import os\nos.truncate('old', 19 << 20)\n" + write[strings.Index(write, "for i"):]},
	} {
		if res := run(step.w, over, step.code, 30); res.Status != wire.StatusOK {
			t.Fatalf("on %s: %s %s %q", step.w.ID(), res.Status, res.Message, res.Stderr)
		}
	}
	res = run(b, over, "import os\nprint(os.path.getsize('old') >> 20)", 20)
	if res.Status != wire.StatusLimit || res.Limit != wire.LimitDisk {
		t.Errorf("restoring 19 MiB and 400 blocks under 20 MiB over an older 25 MiB copy: status %s, limit %q: %s %q; want the disk limit", res.Status, res.Limit, res.Message, res.Stdout)
	}
	if du := DiskUsage(sessionWork(b, over)); du > 20<<20 {
		t.Errorf("the workspace restored over an older copy takes %d KiB, over its 20 MiB limit", du>>10)
	}
}

// A session whose file system the kernel made read-only (its image could
// not be written back: the data directory's disk was full) gets a new one
// at its next call once the disk has room, with its files restored from
// their last saved snapshot. Every later call of the session used to fail
// ("set the disk limit: ... read-only file system"), even once the disk had
// room again.
func TestReadOnlySessionFSIsMadeAgain(t *testing.T) {
	needSessionFS(t)
	fx := newLifecycleFixture(t)
	data := t.TempDir()
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=160m"); err != nil {
		t.Skipf("no tmpfs for the data directory: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(data, unix.MNT_DETACH) })
	w, err := New(Config{
		ID: "full", DataDir: data, Sandbox: testSandbox(t), UIDDir: filepath.Join(fx.dataDir, "uids"), ExecMode: ExecSpawn,
		Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
	}, fx.broker, fx.store)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	if w.sessionFS == nil {
		t.Fatal("the worker has no session file systems where diskfs works")
	}
	const scope = "readonly-scope"
	if res := runDiskJob(t, fx, scope, "open('keep.txt', 'w').write('kept')", 20); res.Status != wire.StatusOK {
		t.Fatalf("first job: %s: %s %s", res.Status, res.Message, res.Stderr)
	}
	// The data directory's disk fills up; a job writes 5 MB, answered ok
	// from the page cache, which cannot be written back to the image.
	unix.Sync()
	var st unix.Statfs_t
	if err := unix.Statfs(data, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(data, "filler")
	if err := os.WriteFile(filler, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filler, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bavail)*st.Bsize-64<<10); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if res := runDiskJob(t, fx, scope, "open('big', 'wb').write(b'y' * 5_000_000)", 20); res.Status != wire.StatusOK {
		t.Fatalf("job writing 5 MB: %s: %s %s", res.Status, res.Message, res.Stderr)
	}
	unix.Sync()
	dir := filepath.Join(w.sessionsRoot(), scope)
	if err := os.WriteFile(filepath.Join(dir, diskfs.Work, "probe"), nil, 0o600); !errors.Is(err, unix.EROFS) {
		t.Skipf("the file system did not go read-only when its image could not be written: write %v", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	res := runDiskJob(t, fx, scope, "import os; print(open('keep.txt').read(), os.path.getsize('big')); open('more.txt', 'w').write('more')", 20)
	if res.Status != wire.StatusOK || res.Stdout != "kept 5000000\n" {
		t.Fatalf("job after the file system went read-only: %s: %s %q %s", res.Status, res.Message, res.Stdout, res.Stderr)
	}
}
