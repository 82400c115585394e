package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/internal/memtest"
	"github.com/codexec/codexec/wire"
)

// nest makes depth directories, each in the last, by descriptors: the
// whole path is far longer than PATH_MAX.
func nest(t *testing.T, dir string, depth int) {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("d", 200)
	for range depth {
		if err := unix.Mkdirat(fd, name, 0o700); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
}

// A tree nested past PATH_MAX is measured whole: measured by path names,
// everything below 4096 bytes of nesting counted for nothing, and a job
// filled a 20 MiB workspace with 152 MiB that way.
func TestDiskUsageSeesPastPathMax(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const depth = 200 // 40 kB of path, ten times PATH_MAX
	nest(t, dir, depth)
	if got, want := DiskUsage(dir), int64(depth+1)*minFileUsage; got < want {
		t.Fatalf("DiskUsage = %d, want at least %d (%d nested directories)", got, want, depth)
	}
}

// Trimming removes what changed since the job began, deepest first, and
// keeps what was there before.
func TestTrimWorkspaceRemovesWhatTheJobWrote(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old := filepath.Join(dir, "old")
	if err := os.MkdirAll(old, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "kept"), make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * coarseClockLag) // the job begins after the old files were written
	started := time.Now()
	if err := os.WriteFile(filepath.Join(old, "new"), make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	nest(t, dir, 100)
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if !trimWorkspace(dir, started, 512<<10) {
		t.Fatalf("still over 512 KiB after trimming: %d", DiskUsage(dir))
	}
	if _, err := os.Stat(filepath.Join(old, "kept")); err != nil {
		t.Errorf("a file from before the job was removed: %v", err)
	}
	for _, gone := range []string{filepath.Join(old, "new"), filepath.Join(dir, "big"), filepath.Join(dir, strings.Repeat("d", 200))} {
		if _, err := os.Lstat(gone); err == nil {
			t.Errorf("%s, written by the job, is still there", gone)
		}
	}
}

// The attacks that passed a sampled disk limit, through a real worker and
// its sandbox: a job that fallocates far past its limit between two
// samples, and one that nests directories past PATH_MAX. Both end on the
// disk limit, and leave the workspace under it, whether the limit is
// measured (--session-fs off, or a machine without session file systems)
// or the kernel's.
func TestDiskLimitAttacks(t *testing.T) {
	fx := newLifecycleFixture(t)
	for _, fsMode := range []string{SessionFSOff, SessionFSAuto} {
		t.Run("session-fs="+fsMode, func(t *testing.T) {
			w, err := New(Config{
				ID: "disk-" + fsMode, DataDir: filepath.Join(fx.dataDir, fsMode), Sandbox: testSandbox(t),
				UIDDir: filepath.Join(fx.dataDir, "uids"), SessionFS: fsMode,
				Concurrency: 1, Pythons: []string{}, Logger: slog.New(slog.DiscardHandler),
			}, fx.broker, fx.store)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = w.Stop(context.Background()) }()
			diskLimitAttacks(ctx, t, fx, w)
		})
	}
}

func diskLimitAttacks(ctx context.Context, t *testing.T, fx *lifecycleFixture, w *Worker) {
	const limit = 20 << 20
	for name, code := range map[string]string{"fallocate": fallocateAttack, "nested": nestedAttack} {
		t.Run(name, func(t *testing.T) {
			scope := "disk-" + name
			job := &wire.Job{
				ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
				Code: code, Filename: "main.py", TimeoutMS: 60000, Deadline: time.Now().Add(time.Minute).UTC(),
				Limits: &wire.Limits{DiskMB: limit >> 20},
			}
			if err := fx.broker.PublishJob(ctx, job); err != nil {
				t.Fatal(err)
			}
			res, err := fx.broker.WaitResult(ctx, job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != wire.StatusLimit || res.Limit != wire.LimitDisk {
				t.Errorf("status %s, limit %q, want limit %q: %s\nstdout %q\nstderr %q", res.Status, res.Limit, wire.LimitDisk, res.Message, res.Stdout, res.Stderr)
			}
			if du := workspaceTaken(t, w, scope); du > limit {
				t.Errorf("the workspace takes %d KiB after the job, over its %d KiB limit (%s)", du>>10, limit>>10, res.Message)
			}
		})
	}
}

// workspaceTaken is what scope's working directory takes by its disk
// limit's count: measured, DiskUsage (every entry at least 4 KiB); in a
// session file system, the blocks its entries hold, as the kernel counts
// them, so that the empty file a job made when its write was refused
// (nestedAttack's last 'data') counts nothing, as it takes nothing. With
// the limit set to the block, that file put DiskUsage a block past it.
func workspaceTaken(t *testing.T, w *Worker, scope string) int64 {
	t.Helper()
	dir := sessionWork(w, scope)
	if w.sessionFS == nil {
		return DiskUsage(dir)
	}
	var taken int64
	if err := walkTree(dir, func(_ *os.File, _ string, st *unix.Stat_t) { taken += st.Blocks * 512 }, nil); err != nil {
		t.Fatal(err)
	}
	return taken
}

// fallocateAttack reserves 760 MiB in files of 19 MiB (each under the file
// size limit the disk limit implies) faster than any sample, then waits.
const fallocateAttack = `import os, time
for i in range(40):
    fd = os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o600)
    os.posix_fallocate(fd, 0, 19 << 20)
    os.close(fd)
print('760 MiB reserved', flush=True)
time.sleep(5)
`

// nestedAttack nests directories, each with a file, until well past
// PATH_MAX and past the limit.
const nestedAttack = `import os
fd = os.open('.', os.O_RDONLY)
for i in range(6000):
    os.mkdir('d' * 200, dir_fd=fd)
    nfd = os.open('d' * 200, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
    with open(os.open('data', os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), 'wb') as f:
        f.write(b'x' * 20000)
print('nested 6000 deep', flush=True)
`

// Without root the worker is its jobs' uid: a directory that a job locked
// (chmod 000), its working directory included, hides nothing from the
// walk, and trimming still removes what the job wrote in it. Run as root,
// the test runs itself again as an unprivileged uid (nobody).
func TestLockedDirectoriesHideNothingWithoutRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t, "TestLockedDirectoriesHideNothingWithoutRoot")
		return
	}
	t.Parallel()
	dir := t.TempDir()
	time.Sleep(2 * coarseClockLag)
	started := time.Now()
	inner := filepath.Join(dir, "locked", "inner")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "big"), make([]byte, 2<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{inner, filepath.Dir(inner), dir} {
		if err := os.Chmod(d, 0); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { // for TempDir's removal, whatever happened
		for _, d := range []string{dir, filepath.Dir(inner), inner} {
			_ = os.Chmod(d, 0o700)
		}
	})
	if got := DiskUsage(dir); got < 2<<20 {
		t.Errorf("DiskUsage = %d with 2 MiB in locked directories", got)
	}
	if !trimWorkspace(dir, started, 1<<20) {
		t.Errorf("still over 1 MiB after trimming: %d", DiskUsage(dir))
	}
}

// runAsNobody runs the test name of this test binary as uid 65534 and
// fails if it fails. The binary is copied where that uid may run it.
func runAsNobody(t *testing.T, name string) {
	t.Helper()
	const nobody = 65534
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "worker.test")
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run", "^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "TMPDIR=/tmp", "HOME=/tmp"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("as uid %d: %v\n%s", nobody, err, out)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("as uid %d, the test did not pass:\n%s", nobody, out)
	}
}

// With --session-fs off the disk watch measures the working directory
// every 100 ms while a job runs: a directory of 60,000 names (hard links
// of an empty file, with long names) is read a buffer at a time, not
// whole, and each name still counts; trimming one removes every name.
func TestDiskUsageReadsDirectoriesInPieces(t *testing.T) {
	dir := t.TempDir()
	since := time.Now()
	base := filepath.Join(dir, "sub", "base")
	if err := os.MkdirAll(filepath.Dir(base), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const links = 60000 // about 12 MB of names alone
	pad := strings.Repeat("x", 200)
	for i := range links {
		if err := os.Link(base, filepath.Join(dir, "sub", fmt.Sprintf("%s%06d", pad, i))); err != nil {
			t.Fatal(err)
		}
	}
	var usage int64
	if peak := memtest.PeakHeap(func() { usage = DiskUsage(dir) }); peak > 4<<20 {
		t.Errorf("measuring held %d bytes, more than %d", peak, 4<<20)
	}
	if want := int64(links+1) * minFileUsage; usage < want {
		t.Errorf("DiskUsage = %d, want at least %d", usage, want)
	}
	if !trimWorkspace(dir, since, 64<<10) {
		t.Error("trimming left the directory over its limit")
	}
	if entries, _ := os.ReadDir(filepath.Join(dir, "sub")); len(entries) != 0 {
		t.Errorf("trimming left %d names", len(entries))
	}
}
