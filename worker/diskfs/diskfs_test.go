package diskfs

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// need skips the test where file systems cannot be made (not root, no
// loop devices, no mkfs.ext4), with the reason; with CI=true it fails.
func need(t testing.TB) {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs loop devices and mkfs.ext4 as root: %v", err)
		}
		t.Skip(err)
	}
}

// mounted makes an image of size bytes and mounts it; the file system is
// unmounted when the test ends.
func mounted(t testing.TB, size int64) *FS {
	t.Helper()
	need(t)
	dir := t.TempDir()
	// Passable, for the unprivileged writer of the tests.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	image, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Create(context.Background(), image, size); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(image, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Unmount() })
	return f
}

const nobody = 65534

// asNobody runs Python code in dir as an unprivileged uid, as a job runs;
// it returns the output and whether the code raised.
func asNobody(t *testing.T, dir, code string) (string, bool) {
	t.Helper()
	cmd := exec.Command(unprivilegedPython(t), "-c", code)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	return string(out), err != nil
}

// unprivilegedPython is a Python interpreter that an unprivileged uid may
// run (one under /root, as pyenv's, it may not).
func unprivilegedPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, py := range []string{"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"} {
		cmd := exec.Command(py, "-c", "pass")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		if err := cmd.Run(); err == nil {
			return py
		}
		tried = append(tried, py)
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI needs a python3 that uid %d may run; tried %v", nobody, tried)
	}
	t.Skipf("no python3 that uid %d may run; tried %v", nobody, tried)
	return ""
}

// The two attacks that passed the sampled limit, against the kernel's:
// fallocate far past the limit at once, and directories nested past
// PATH_MAX. Both fail with ENOSPC at the limit, and the Work directory
// never holds more than it.
func TestLimitRefusesWritesPastIt(t *testing.T) {
	f := mounted(t, 256<<20)
	if err := os.Chown(f.Work(), nobody, nobody); err != nil {
		t.Fatal(err)
	}
	const limit = 20 << 20
	if err := f.SetLimit(limit); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, code string }{
		{"fallocate", `import os
for i in range(40):
    fd = os.open('f%d' % i, os.O_CREAT | os.O_WRONLY, 0o600)
    os.posix_fallocate(fd, 0, 19 << 20)
    os.close(fd)
`},
		{"nested", `import os
fd = os.open('.', os.O_RDONLY)
for i in range(6000):
    os.mkdir('d' * 200, dir_fd=fd)
    nfd = os.open('d' * 200, os.O_RDONLY, dir_fd=fd)
    os.close(fd)
    fd = nfd
    with open(os.open('data', os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), 'wb') as f:
        f.write(b'x' * 20000)
`},
	} {
		out, raised := asNobody(t, f.Work(), c.code)
		if !raised || !strings.Contains(out, "No space left on device") {
			t.Errorf("%s: want ENOSPC, got raised=%v: %s", c.name, raised, out)
		}
		used, err := f.Usage()
		if err != nil {
			t.Fatal(err)
		}
		if used > limit {
			t.Errorf("%s: the Work directory holds %d bytes, over its limit of %d", c.name, used, limit)
		}
		t.Logf("%s: %d KiB used of %d KiB", c.name, used>>10, limit>>10)
		if err := os.RemoveAll(f.Work()); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(f.Work(), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f.Work(), nobody, nobody); err != nil {
			t.Fatal(err)
		}
		if err := f.SetLimit(limit); err != nil {
			t.Fatal(err)
		}
	}
}

// The limit follows each SetLimit, whatever the Work directory holds, and
// holds across an unmount and a mount.
func TestSetLimitFollowsWhatIsThere(t *testing.T) {
	f := mounted(t, 128<<20)
	write := func(name string, n int64) error {
		fd, err := os.OpenFile(filepath.Join(f.Work(), name), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer fd.Close()
		return syscall.Fallocate(int(fd.Fd()), 0, 0, n)
	}
	// Root ignores nothing here: the ballast is a file, not a reserve.
	if err := f.SetLimit(8 << 20); err != nil {
		t.Fatal(err)
	}
	if err := write("a", 6<<20); err != nil {
		t.Fatalf("6 MiB under an 8 MiB limit: %v", err)
	}
	if err := write("b", 4<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("6 + 4 MiB under an 8 MiB limit: %v, want ENOSPC", err)
	}
	if err := f.SetLimit(16 << 20); err != nil {
		t.Fatal(err)
	}
	if err := write("b", 4<<20); err != nil {
		t.Fatalf("6 + 4 MiB under a 16 MiB limit: %v", err)
	}
	// Below what is there: nothing more fits.
	if err := f.SetLimit(1 << 20); err != nil {
		t.Fatal(err)
	}
	if err := write("c", 64<<10); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("64 KiB more with 10 MiB under a 1 MiB limit: %v, want ENOSPC", err)
	}
	image, dir := f.image, f.dir
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	g, err := Mount(image, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(g.Work(), "a")); err != nil {
		t.Errorf("after a new mount: %v", err)
	}
	if err := write("c", 64<<10); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("after a new mount, the limit did not hold: %v", err)
	}
	if used, err := g.Usage(); err != nil || used < 10<<20 || used > 11<<20 {
		t.Errorf("Usage = %d, %v; want about 10 MiB", used, err)
	}
}

// The limit is the bytes asked, to the block: what the Work directory
// holds and what it may still allocate add up to it, from a new file
// system's first SetLimit (whose ballast takes an extent block it had not
// counted) to a grown and a shrunk limit, on a small image and on one the
// size of a worker's.
func TestSetLimitIsExact(t *testing.T) {
	for _, size := range []int64{256 << 20, 32 << 30} {
		f := mounted(t, size)
		exact := func(limit int64) {
			t.Helper()
			if err := f.SetLimit(limit); err != nil {
				t.Fatal(err)
			}
			used, err := f.Usage()
			if err != nil {
				t.Fatal(err)
			}
			avail, err := f.Avail()
			if err != nil {
				t.Fatal(err)
			}
			if used+avail != limit {
				t.Errorf("%d MiB image, %d KiB limit: %d KiB used, %d KiB free: %d KiB off",
					size>>20, limit>>10, used>>10, avail>>10, (used+avail-limit)>>10)
			}
		}
		exact(20 << 20)
		if err := os.WriteFile(filepath.Join(f.Work(), "a"), make([]byte, 3<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		exact(8 << 20)
		exact(64 << 20)
		exact(20 << 20)
	}
}

// Mounting an image on the directory that already has it (a worker that
// died left it mounted) reuses that mount; mounting it anywhere else while
// it is attached is refused, since two mounts would corrupt it.
func TestMountReusesItsMountAndRefusesASecond(t *testing.T) {
	f := mounted(t, 64<<20)
	again, err := Mount(f.image, f.dir)
	if err != nil {
		t.Fatalf("mounting again where it is mounted: %v", err)
	}
	if again.overhead != f.overhead {
		t.Errorf("overhead %d, then %d", f.overhead, again.overhead)
	}
	// Named through a link, the image is the same image.
	link := filepath.Join(t.TempDir(), "link.img")
	if err := os.Symlink(f.image, link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	if g, err := Mount(link, other); !errors.Is(err, ErrInUse) {
		if g != nil {
			_ = g.Unmount()
		}
		t.Fatalf("a second mount of an attached image: %v, want ErrInUse", err)
	}
}

// What a session's first call pays: a new image, mkfs.ext4, a loop device,
// a mount, the first ballast (the whole file system but the default limit),
// and the unmount.
func BenchmarkCreateAndMount(b *testing.B) {
	need(b)
	benchNewImage(b, b.TempDir(), func(image string) error { return Create(context.Background(), image, 32<<30) })
}

// benchNewImage times a new session's file system: newImage makes its image
// (32 GiB) in dir, which is mounted, given the 2 GiB default limit and
// unmounted.
func benchNewImage(b *testing.B, dir string, newImage func(image string) error) {
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		image := filepath.Join(dir, "fs.img")
		if err := newImage(image); err != nil {
			b.Fatal(err)
		}
		f, err := Mount(image, mnt)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.SetLimit(2 << 30); err != nil {
			b.Fatal(err)
		}
		if err := f.Unmount(); err != nil {
			b.Fatal(err)
		}
		os.Remove(image)
	}
}

// What a returning session pays after its file system was unmounted: a
// loop device and a mount (and the unmount).
func BenchmarkMountExisting(b *testing.B) {
	f := mounted(b, 32<<30)
	image, dir := f.image, f.dir
	if err := f.Unmount(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		g, err := Mount(image, dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Unmount(); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := Mount(image, dir); err != nil { // for the cleanup's unmount
		b.Fatal(err)
	}
}

// What every job pays: its limit set by the ballast, alternating between a
// small and a large limit so that the ballast changes each time.
func BenchmarkSetLimit(b *testing.B) {
	f := mounted(b, 32<<30)
	if err := f.SetLimit(2 << 30); err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		limit := int64(20 << 20)
		if i%2 == 1 {
			limit = 2 << 30 // the default
		}
		if err := f.SetLimit(limit); err != nil {
			b.Fatal(err)
		}
	}
}

// What a job pays whose limit is its session's last one (the default
// limit, call after call): one statfs, the ballast unchanged.
func BenchmarkSetLimitUnchanged(b *testing.B) {
	f := mounted(b, 32<<30)
	if err := f.SetLimit(2 << 30); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := f.SetLimit(2 << 30); err != nil {
			b.Fatal(err)
		}
	}
}

// What the image takes on the host's disk: sparse, the ballast a few
// bitmap and extent blocks whatever its size.
func TestImageStaysSparse(t *testing.T) {
	f := mounted(t, 32<<30)
	if err := f.SetLimit(20 << 20); err != nil {
		t.Fatal(err)
	}
	if err := syncfs(f.dir); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(f.image, &st); err != nil {
		t.Fatal(err)
	}
	// mkfs writes the journal (128 MiB for 32 GiB) and group descriptors.
	if host := st.Blocks * 512; host > 256<<20 {
		t.Errorf("a 32 GiB file system with a 32 GiB ballast takes %d MiB of the host's disk", host>>20)
	} else {
		t.Logf("a 32 GiB image, ballast set for 20 MiB: %d MiB on the host", host>>20)
	}
}

func syncfs(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// A worker started with a PATH that lacks the sbin directories (as an MCP
// client starts a server, with PATH=/usr/bin:/bin) still finds mkfs.ext4
// and makes file systems: before, it fell back to sampling the disk limit,
// which a job's fallocate passes between two samples.
func TestMkfsFoundOffPATH(t *testing.T) {
	need(t)
	const narrow = "/usr/bin:/bin"
	for _, dir := range filepath.SplitList(narrow) {
		if fi, err := os.Stat(filepath.Join(dir, "mkfs.ext4")); err == nil && !fi.IsDir() {
			t.Skipf("mkfs.ext4 is in %s here: a PATH without sbin finds it anyway", dir)
		}
	}
	t.Setenv("PATH", narrow)
	if err := Check(); err != nil {
		t.Fatalf("with PATH=%s: %v", narrow, err)
	}
	image := filepath.Join(t.TempDir(), "fs.img")
	if err := Create(t.Context(), image, 64<<20); err != nil {
		t.Fatalf("with PATH=%s: %v", narrow, err)
	}
}

// What a job deletes leaves the host's disk: the image gives the freed
// blocks back (online discard, a hole punched in the image). Before, the
// image kept every block a job had ever written, so a session that wrote
// its whole disk limit and deleted it held that much of the host's disk for
// good while its working directory (and its tenant's working_dir_bytes)
// counted nothing, and one session after another filled the host.
func TestDeletedFilesLeaveTheHostsDisk(t *testing.T) {
	f := mounted(t, 1<<30)
	if err := f.SetLimit(256 << 20); err != nil {
		t.Fatal(err)
	}
	host := func() int64 {
		t.Helper()
		if err := syncfs(f.dir); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(f.image, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := host()
	name := filepath.Join(f.Work(), "big")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	w, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	for range 64 {
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if written := host(); written < before+60<<20 {
		t.Fatalf("64 MiB written took %d MiB of the host's disk: the test writes nothing", (written-before)>>20)
	}
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	var after int64
	for range 50 {
		if after = host(); after < before+8<<20 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("64 MiB written then deleted: the image still takes %d MiB of the host's disk more than before", (after-before)>>20)
}

// createChildEnv names the image a child process of
// TestCreateKilledLeavesNoImage makes.
const createChildEnv = "CODEXEC_DISKFS_CREATE_CHILD"

// A worker killed with its mkfs.ext4 (a service's whole group, an OOM
// kill) while it made a session's image left that image cut short where
// the session's image is looked for: no later call of the session could
// mount it on that worker. Now nothing is at that path until mkfs.ext4
// has finished, and the next Create replaces what the killed one left.
func TestCreateKilledLeavesNoImage(t *testing.T) {
	if image := os.Getenv(createChildEnv); image != "" {
		if err := Create(context.Background(), image, 1<<40); err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	need(t)
	dir := t.TempDir()
	image := filepath.Join(dir, "s.img")
	for try := 0; try < 3; try++ {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestCreateKilledLeavesNoImage$")
		cmd.Env = append(os.Environ(), createChildEnv+"="+image)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Killed, with mkfs.ext4, a moment after the file appears.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			_, e1 := os.Lstat(image)
			_, e2 := os.Lstat(image + ".mkfs")
			if e1 == nil || e2 == nil {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		time.Sleep(time.Duration(try) * 2 * time.Millisecond)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		state, _ := cmd.Process.Wait()
		if state != nil && state.Exited() {
			t.Logf("try %d: Create finished before the kill (exit %d)", try, state.ExitCode())
			os.Remove(image)
			continue
		}
		if _, err := os.Lstat(image); err == nil {
			t.Fatalf("try %d: the killed Create left %s, which no call could mount", try, image)
		}
	}
	// The next Create replaces the leftover, and its image mounts.
	if err := Create(context.Background(), image, 64<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(image + ".mkfs"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Create, %s.mkfs: %v", image, err)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := Mount(image, mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := Create(context.Background(), image, 64<<20); !errors.Is(err, os.ErrExist) {
		t.Errorf("Create over an image: %v, want it refused", err)
	}
}

// A session's file system has at most MaxInodes inodes: each one's 256
// bytes of inode table take the host's disk once used and count against no
// limit, so at mkfs.ext4's one per 16 KiB a 32 GiB image let a job under a
// 64 MiB limit grow it by 231 MB with 400,000 empty files (and by about 575
// MB with all of them). A small file system keeps one per 16 KiB.
func TestInodesBounded(t *testing.T) {
	for _, tc := range []struct {
		size     int64
		min, max uint64
	}{
		{32 << 30, MaxInodes / 2, MaxInodes},
		{256 << 20, 8192, 16384},
	} {
		f := mounted(t, tc.size)
		var st unix.Statfs_t
		if err := unix.Statfs(f.dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Files < tc.min || st.Files > tc.max {
			t.Errorf("a file system of %d MiB has %d inodes (%d MiB of inode tables), want %d to %d",
				tc.size>>20, st.Files, st.Files*256>>20, tc.min, tc.max)
		}
	}
}
