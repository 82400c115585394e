package diskfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/internal/mountinfo"
)

// Work is the name of the job's directory at the root of a file system.
const Work = "work"

const (
	ballastName   = ".ballast"
	overheadXattr = "trusted.codexec.overhead"
	// loFlagsAutoclear releases a loop device when its last user (the
	// mounted file system) lets go of it.
	loFlagsAutoclear = 4
)

// ErrInUse says an image is attached to a loop device already, and not
// mounted where it was asked to be: mounting it again would corrupt it.
var ErrInUse = errors.New("diskfs: image attached to a loop device already")

// Check says whether this process can make and mount file systems: root,
// /dev/loop-control, mkfs.ext4. The error names what is missing.
func Check() error {
	if os.Geteuid() != 0 {
		return errors.New("diskfs: not root: loop devices and mounts need root")
	}
	f, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("diskfs: no loop devices: %w", err)
	}
	f.Close()
	if _, err := mkfs(); err != nil {
		return fmt.Errorf("diskfs: mkfs.ext4 not found (Debian: apt-get install e2fsprogs): %w", err)
	}
	return nil
}

// sbinDirs are where mkfs.ext4 is installed, looked in when PATH lacks them
// (a server started by an MCP client often gets PATH=/usr/bin:/bin): a
// worker without it would fall back to sampling the disk limit, which a
// fast writer passes.
var sbinDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin"}

// mkfs is the path of mkfs.ext4: on PATH, else in sbinDirs.
func mkfs() (string, error) {
	path, err := exec.LookPath("mkfs.ext4")
	if err == nil {
		return path, nil
	}
	for _, dir := range sbinDirs {
		p := filepath.Join(dir, "mkfs.ext4")
		if fi, serr := os.Stat(p); serr == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", err
}

// Create makes image, a sparse file of size bytes, holding an empty ext4
// file system with no blocks reserved for root and an inode for every
// 16 KiB. It refuses an image that exists. The file system is made under
// another name beside image (its name with ".mkfs" added, a leftover of an
// earlier try replaced) and renamed to image once whole: a worker killed
// while mkfs.ext4 runs leaves no image that does not mount, which would
// fail every later call of its session on that worker.
func Create(ctx context.Context, image string, size int64) error {
	if _, err := os.Lstat(image); err == nil {
		return fmt.Errorf("diskfs: %s: %w", image, os.ErrExist)
	}
	tmp := image + ".mkfs"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("diskfs: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Fixed arguments: -F (a file, not a device), -m 0 (nothing kept
		// for root: the ballast is the only reserve); the inode tables and
		// the journal not written out (a new sparse file reads as zeros
		// already), so that the image stays sparse.
		bin, _ := mkfs() // Check found it; a failure is exec's to report
		if bin == "" {
			bin = "mkfs.ext4"
		}
		out, rerr := exec.CommandContext(ctx, bin, "-q", "-F", "-m", "0", "-N", strconv.FormatInt(inodesFor(size), 10),
			"-E", "nodiscard,lazy_itable_init=1,lazy_journal_init=1", "--", tmp).CombinedOutput()
		if rerr != nil {
			err = fmt.Errorf("mkfs.ext4: %w: %s", rerr, bytes.TrimSpace(out))
		}
	}
	if err == nil {
		err = renameNoReplace(tmp, image)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("diskfs: %s: %w", image, err)
	}
	return nil
}

// MaxInodes bounds the inodes of a session's file system. An inode costs
// its file nothing against the disk limit (an empty file takes only its
// name in a directory block), but its 256 bytes of inode table take the
// host's disk once first used, and keep it: at one inode per 16 KiB, the
// default size's 2,244,608 inodes let a job under disk_mb=64 grow its image
// by 231 MB with 400,000 empty files in 7 s, and a session take about 575
// MB whatever its limit. 262,144 inodes are 64 MiB of tables at most, and
// more files than most workspaces hold.
const MaxInodes = 1 << 18

// inodesFor is the inode count of a file system of size bytes: one per 16
// KiB, as mkfs.ext4 gives by default, at most MaxInodes.
func inodesFor(size int64) int64 {
	return max(min(size/16384, MaxInodes), 1024)
}

// renameNoReplace renames from to to, failing when to exists (as the
// O_EXCL create did before); where the file system cannot rename so, a
// link then an unlink does the same.
func renameNoReplace(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		if err = os.Link(from, to); err == nil {
			return os.Remove(from)
		}
		return err
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// FS is a mounted file system. Its methods are safe for concurrent use.
type FS struct {
	image, dir string
	overhead   int64 // bytes the empty file system uses
	mu         sync.Mutex
}

// Dir is where the file system is mounted.
func (f *FS) Dir() string { return f.dir }

// Work is the job's directory.
func (f *FS) Work() string { return filepath.Join(f.dir, Work) }

// Mount mounts image on dir (which must exist), nosuid and nodev, and
// makes its Work directory (root's, 0700: the caller gives it away). When
// dir already has image mounted (a worker that died left it), that mount
// is used. When image is attached to a loop device but not mounted on dir,
// it fails with ErrInUse.
func Mount(image, dir string) (*FS, error) {
	// As the kernel names them (in mountinfo, in a loop device's
	// backing_file): absolute, no links.
	image, err := filepath.EvalSymlinks(image)
	if err == nil {
		image, err = filepath.Abs(image)
	}
	if err != nil {
		return nil, fmt.Errorf("diskfs: %w", err)
	}
	if dir, err = filepath.EvalSymlinks(dir); err == nil {
		dir, err = filepath.Abs(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("diskfs: %w", err)
	}
	mounted, err := mountedFrom(dir, image)
	if err != nil {
		return nil, err
	}
	if !mounted {
		if dev := attached(image); dev != "" {
			return nil, fmt.Errorf("%w: %s on %s", ErrInUse, image, dev)
		}
		if err := attachAndMount(image, dir); err != nil {
			return nil, err
		}
	}
	f := &FS{image: image, dir: dir}
	if err := f.prepare(); err != nil {
		if !mounted {
			_ = unix.Unmount(dir, 0)
		}
		return nil, err
	}
	return f, nil
}

// attachAndMount gives image a free loop device and mounts it on dir.
func attachAndMount(image, dir string) error {
	img, err := os.OpenFile(image, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("diskfs: %w", err)
	}
	defer img.Close()
	loop, err := attachLoop(img)
	if err != nil {
		return err
	}
	// The loop device is released (autoclear) when the last descriptor
	// on it closes and no file system holds it: after the unmount.
	defer loop.Close()
	// discard: blocks freed in the file system are given back to the
	// host (the loop device punches a hole in the image), so the image
	// holds what the session's files take now, not the most they ever
	// took: without it, a job that wrote its disk limit and deleted it
	// left that much of the host's disk taken while nothing counted it.
	if err := unix.Mount(loop.Name(), dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "noinit_itable,discard"); err != nil {
		return fmt.Errorf("diskfs: mount %s (%s) on %s: %w", image, loop.Name(), dir, err)
	}
	return nil
}

// attachLoop attaches img to a free loop device, returned open.
func attachLoop(img *os.File) (*os.File, error) {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("diskfs: %w", err)
	}
	defer ctl.Close()
	for range 10 {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("diskfs: no free loop device: %w", err)
		}
		loop, err := os.OpenFile("/dev/loop"+strconv.Itoa(n), os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("diskfs: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(img.Fd())}
		cfg.Info.Flags = loFlagsAutoclear
		copy(cfg.Info.File_name[:len(cfg.Info.File_name)-1], img.Name())
		err = unix.IoctlLoopConfigure(int(loop.Fd()), &cfg)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY) {
			// Before Linux 5.8: no LOOP_CONFIGURE.
			if err = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err == nil {
				if err = unix.IoctlLoopSetStatus64(int(loop.Fd()), &cfg.Info); err != nil {
					_ = unix.IoctlSetInt(int(loop.Fd()), unix.LOOP_CLR_FD, 0)
				}
			}
		}
		if err == nil {
			return loop, nil
		}
		loop.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("diskfs: configure %s: %w", loop.Name(), err)
		}
		// Another process took the device between GET_FREE and here.
	}
	return nil, errors.New("diskfs: no free loop device after 10 tries")
}

// prepare makes the Work directory and the ballast, and reads (or, on a
// file system that has neither, measures) the overhead.
func (f *FS) prepare() error {
	buf := make([]byte, 20)
	if n, err := unix.Getxattr(f.dir, overheadXattr, buf); err == nil {
		if f.overhead, err = strconv.ParseInt(string(buf[:n]), 10, 64); err != nil {
			return fmt.Errorf("diskfs: %s: bad %s: %w", f.dir, overheadXattr, err)
		}
	} else {
		used, _, err := f.space()
		if err != nil {
			return err
		}
		f.overhead = used
		if err := unix.Setxattr(f.dir, overheadXattr, []byte(strconv.FormatInt(used, 10)), 0); err != nil {
			return fmt.Errorf("diskfs: %s: %w", f.dir, err)
		}
	}
	if err := os.Mkdir(f.Work(), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("diskfs: %w", err)
	}
	b, err := os.OpenFile(filepath.Join(f.dir, ballastName), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("diskfs: %w", err)
	}
	return b.Close()
}

// space is what the file system uses (bytes) and what an unprivileged
// writer may still allocate.
func (f *FS) space() (used, avail int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(f.dir, &st); err != nil {
		return 0, 0, fmt.Errorf("diskfs: statfs %s: %w", f.dir, err)
	}
	return int64(st.Blocks-st.Bfree) * st.Bsize, int64(st.Bavail) * st.Bsize, nil
}

// SetLimit sets what the Work directory may hold, in bytes (0: all the
// file system has): the ballast grows or shrinks so that writes past it
// fail with ENOSPC. A Work directory already over the limit can allocate
// nothing more until it shrinks below it.
func (f *FS) SetLimit(limit int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.OpenFile(filepath.Join(f.dir, ballastName), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("diskfs: %w", err)
	}
	defer b.Close()
	// A ballast that grew may have taken extent blocks it had not
	// counted (the first fallocate of a new file system's ballast takes
	// one): a second look gives them back, shrinking it, so that the
	// limit is the bytes asked, not a block less.
	grew, err := f.sizeBallast(b, limit, true)
	if err == nil && grew {
		_, err = f.sizeBallast(b, limit, false)
	}
	return err
}

// sizeBallast sizes the ballast b for limit, growing it only when grow is
// set, and reports whether it grew.
func (f *FS) sizeBallast(b *os.File, limit int64, grow bool) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(b.Fd()), &st); err != nil {
		return false, fmt.Errorf("diskfs: %w", err)
	}
	ballast := st.Blocks * 512 // its data and its extent blocks
	used, avail, err := f.space()
	if err != nil {
		return false, err
	}
	work := used - ballast - f.overhead
	// The ballast takes all the rest but what the job may still use;
	// its size is that less its extent blocks.
	want := int64(0)
	if limit > 0 {
		want = avail + ballast - max(0, limit-work) - (ballast - st.Size)
	}
	want = max(0, want) &^ (st.Blksize - 1)
	if want < st.Size {
		if err := b.Truncate(want); err != nil {
			return false, fmt.Errorf("diskfs: ballast: %w", err)
		}
	}
	if !grow || want <= st.Size {
		return false, nil
	}
	// Growing may find a few blocks short (the ballast's own extent
	// blocks): then it takes what there is, a few blocks less at a time
	// (a MiB at a time after 16 tries), so that the limit is what was
	// asked within a few blocks.
	step := 4 * st.Blksize
	for i := 0; want > st.Size; i++ {
		err := unix.Fallocate(int(b.Fd()), 0, 0, want)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, unix.ENOSPC) {
			return false, fmt.Errorf("diskfs: ballast: %w", err)
		}
		if i == 16 {
			step = 1 << 20
		}
		want -= step
	}
	return false, nil
}

// Usage is what the Work directory holds, in bytes: what the file system
// uses, less its ballast and its own overhead (so it counts the
// directories' blocks and the files' extent blocks too).
func (f *FS) Usage() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(f.dir, ballastName), &st); err != nil {
		return 0, fmt.Errorf("diskfs: %w", err)
	}
	used, _, err := f.space()
	if err != nil {
		return 0, err
	}
	return max(0, used-st.Blocks*512-f.overhead), nil
}

// Avail is what the Work directory may still allocate under its limit, in
// bytes: the file system's free blocks, the ballast's taken.
func (f *FS) Avail() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, avail, err := f.space()
	return avail, err
}

// ReadOnly says whether the file system can no longer be written: mounted
// read-only, or made read-only by ext4 itself after an error (its journal
// aborted; newer kernels keep the mount "rw" and mark it emergency_ro, which
// statfs does not show), found by opening the ballast for writing.
func (f *FS) ReadOnly() bool {
	var st unix.Statfs_t
	if unix.Statfs(f.dir, &st) == nil && st.Flags&unix.ST_RDONLY != 0 {
		return true
	}
	b, err := os.OpenFile(filepath.Join(f.dir, ballastName), os.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errors.Is(err, unix.EROFS)
	}
	_ = b.Close()
	return false
}

// Unmount unmounts the file system; its loop device goes with it. A file
// system still in use (EBUSY) is detached, and goes when its last user
// does.
func (f *FS) Unmount() error {
	// Flushed first: a mount namespace made anywhere on the host while
	// the file system was mounted (every sandbox makes one) holds a copy
	// of the mount, which keeps the file system alive past this unmount,
	// its last writes still in an uncommitted journal transaction until
	// that namespace ends. A template unmounted so was cloned without
	// them: its clones had no ballast and failed with EIO.
	if d, err := os.Open(f.dir); err == nil {
		_ = unix.Syncfs(int(d.Fd()))
		d.Close()
	}
	err := unix.Unmount(f.dir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(f.dir, unix.MNT_DETACH)
	}
	if err != nil {
		return fmt.Errorf("diskfs: unmount %s: %w", f.dir, err)
	}
	return nil
}

// mountedFrom says whether dir is the mount point of a loop device backed
// by image.
func mountedFrom(dir, image string) (bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("diskfs: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || mountinfo.Unescape(fields[4]) != dir {
			continue
		}
		for i, fld := range fields {
			if fld == "-" && i+2 < len(fields) && strings.HasPrefix(fields[i+2], "/dev/loop") {
				if backing(filepath.Base(fields[i+2])) == image {
					return true, nil
				}
			}
		}
	}
	return false, sc.Err()
}

// MountsUnder lists the mount points strictly below dir (absolute, no
// links), deepest first: what to unmount before dir.
func MountsUnder(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("diskfs: %w", err)
	}
	out, err := mountinfo.Under(bytes.NewReader(data), dir)
	if err != nil {
		return nil, fmt.Errorf("diskfs: %w", err)
	}
	// Deeper paths are longer: reverse order of length is deepest first.
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out), nil
}

// IsMountPoint says whether dir (absolute, no links) is a mount point.
func IsMountPoint(dir string) (bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, fmt.Errorf("diskfs: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Fields(line); len(fields) >= 5 && mountinfo.Unescape(fields[4]) == dir {
			return true, nil
		}
	}
	return false, nil
}

// attached is the loop device image is attached to, "" for none.
func attached(image string) string {
	devs, _ := filepath.Glob("/sys/block/loop*")
	for _, d := range devs {
		if backing(filepath.Base(d)) == image {
			return "/dev/" + filepath.Base(d)
		}
	}
	return ""
}

// backing is the file behind the loop device name ("loop3"), "" for none.
func backing(name string) string {
	b, err := os.ReadFile("/sys/block/" + name + "/loop/backing_file")
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}
