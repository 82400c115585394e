// Package diskfs gives a directory a size limit that the kernel enforces,
// set per job and changed in microseconds: the directory is the root of an
// ext4 file system of its own, in a sparse image file, loop-mounted; the
// job's part of it is the Work directory, and a ballast file beside it
// (root's, out of the job's sight) takes up whatever the job may not use.
// A write past the limit fails with ENOSPC, however fast it comes: no
// measurement to outrun, no tree too deep to measure.
//
// Layout of a file system: Work (the job's directory), a ballast file, and
// lost+found. The file system's own overhead (journal, bitmaps, inode
// tables) is measured once, empty, and kept in an extended attribute of its
// root (trusted.*: root's only), so that SetLimit needs one statfs and one
// fallocate or ftruncate, and no walk of the job's files.
//
// Loop devices come from /dev/loop-control and are configured with
// LO_FLAGS_AUTOCLEAR: the device is released when its file system is
// unmounted, and a process that dies with a file system mounted leaves the
// mount (which Mount then reuses), never an orphaned device. An image is
// never attached twice: a second mount of one ext4 image through two
// devices would corrupt it. mkfs.ext4 is run with fixed arguments.
//
// A new session's file system need not pay for mkfs.ext4 and its first
// ballast: MakeTemplate makes one, mounted once and set for a limit, and
// Clone copies it (FICLONE, or copy_file_range of its data only, holes
// kept), ready to mount.
//
// Everything here needs root (CAP_SYS_ADMIN for loop devices and mounts);
// Check says whether this process can use it, and why not.
package diskfs
