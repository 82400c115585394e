package cgroup

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// keptFiles are a group's counter files (Usage's, pids.current for Tasks
// and memory.stat for Held), opened once when the group is made and read again with one
// pread from offset 0 each time: a cgroup file is made anew for a read
// that starts at 0, so a kept descriptor reads what a fresh open would.
// A pooled group's counters are read two or three times per job and
// pids.current a few more (the worker's settle); opening, reading to the
// end and closing each file every time cost a sandboxed job about 0.2 ms
// of the worker's CPU with 8 callers. The descriptors are close-on-exec.
type keptFiles map[string]*keptFile

// keptFile is one open counter file.
type keptFile struct {
	f  *os.File
	rc syscall.RawConn
}

// keepFiles opens the files (full paths) that exist; a file that cannot
// be opened is read by its path when asked for, as before.
func keepFiles(paths []string) keptFiles {
	k := make(keptFiles, len(paths))
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			continue
		}
		k[p] = &keptFile{f: f, rc: rc}
	}
	return k
}

// read returns the content of dir/file: through its kept descriptor if it
// has one, by its path otherwise. A kept file whose group was removed
// reads as an error (ENODEV), as its path would (ENOENT).
func (k keptFiles) read(dir, file string) ([]byte, error) {
	path := filepath.Join(dir, file)
	kf := k[path]
	if kf == nil {
		return os.ReadFile(path)
	}
	// Every counter file is a few lines, memory.stat a few dozen (about
	// 900 bytes on v1, 1,500 on v2); one that fills the buffer is read
	// whole by its path. (Until 2026-12-05 memory.stat was not kept and
	// the buffer was 512 bytes: each job's Held opened, read and closed it.)
	bp := readBufs.Get().(*[4 << 10]byte)
	defer readBufs.Put(bp)
	buf := bp[:]
	var n int
	var rerr error
	if err := kf.rc.Read(func(fd uintptr) bool {
		n, rerr = unix.Pread(int(fd), buf, 0)
		return true
	}); err != nil {
		return nil, err
	}
	switch {
	case rerr != nil:
		return nil, rerr
	case n == len(buf):
		return os.ReadFile(path)
	}
	return append([]byte(nil), buf[:n]...), nil
}

// readBufs are read's buffers: a counter file is read a few times per job.
var readBufs = sync.Pool{New: func() any { return new([4 << 10]byte) }}

// close closes the kept files (a read after it fails, as a read of a
// removed group's file would); the map itself is left as it is, for
// reads that may run meanwhile.
func (k keptFiles) close() {
	for _, kf := range k {
		_ = kf.f.Close()
	}
}
