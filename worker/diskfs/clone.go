package diskfs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// MakeTemplate makes image a file system to Clone sessions' images from:
// made by Create (size bytes), mounted once on dir (which must exist) so
// that it has its Work directory, its measured overhead and a ballast set
// for limit, then unmounted. A clone is then ready for a job of that limit
// without mkfs.ext4 or a first fallocate. On failure no image is left.
func MakeTemplate(ctx context.Context, image, dir string, size, limit int64) error {
	if err := Create(ctx, image, size); err != nil {
		return err
	}
	f, err := Mount(image, dir)
	if err == nil {
		err = f.SetLimit(limit)
		if uerr := f.Unmount(); err == nil {
			err = uerr
		}
	}
	if err != nil {
		os.Remove(image)
		return err
	}
	return nil
}

// Clone makes image a copy of template (an image that no loop device has
// attached, from MakeTemplate): by FICLONE where the host's file system
// shares blocks between files (btrfs, XFS), else by copy_file_range of the
// template's data only, its holes left holes, so that the copy is as sparse
// as the template (a few MiB of a 32 GiB image), and by read and write
// where copy_file_range cannot. It refuses an image that exists, and
// leaves none on failure.
//
// Every clone has the template's file system UUID: ext4 does not mind, and
// nothing here mounts by UUID.
func Clone(template, image string) error {
	src, err := os.OpenFile(template, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("diskfs: %w", err)
	}
	defer src.Close()
	dst, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("diskfs: %w", err)
	}
	err = cloneInto(src, dst)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(image)
		return fmt.Errorf("diskfs: clone %s to %s: %w", template, image, err)
	}
	return nil
}

func cloneInto(src, dst *os.File) error {
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return err
	}
	if !(st.Mode&unix.S_IFMT == unix.S_IFREG) {
		return errors.New("template is not a regular file")
	}
	if err := dst.Truncate(st.Size); err != nil {
		return err
	}
	copyRange := true
	for off := int64(0); off < st.Size; {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // holes to the end
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(int(src.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		if copyRange {
			err = copyFileRange(src, dst, data, hole-data)
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				copyRange = false
			}
		}
		if !copyRange {
			err = readWrite(src, dst, data, hole-data)
		}
		if err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyFileRange copies n bytes at off of src to the same offset of dst.
func copyFileRange(src, dst *os.File, off, n int64) error {
	for n > 0 {
		in, out := off, off
		c, err := unix.CopyFileRange(int(src.Fd()), &in, int(dst.Fd()), &out, int(min(n, 1<<30)), 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if c == 0 {
			return io.ErrUnexpectedEOF
		}
		off, n = off+int64(c), n-int64(c)
	}
	return nil
}

// readWrite copies n bytes at off of src to the same offset of dst.
func readWrite(src, dst *os.File, off, n int64) error {
	w := io.NewOffsetWriter(dst, off)
	_, err := io.CopyBuffer(w, io.NewSectionReader(src, off, n), make([]byte, 1<<20))
	return err
}
