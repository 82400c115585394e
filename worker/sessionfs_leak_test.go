package worker

import (
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
)

// A job's mount table names no other session: the sessions' file systems
// are mounted under a shared root that the jobs' namespaces follow (as
// slaves), so each mount reaches every namespace, where it lies under the
// hidden sessions root; the table must still not list other sessions.
func TestJobMountsNameNoOtherSession(t *testing.T) {
	needSessionFS(t)
	fx := newLifecycleFixture(t)
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		t.Run(mode, func(t *testing.T) {
			startDiskWorker(t, fx, mode)
			other := "neighbour-" + mode
			if res := runDiskJob(t, fx, other, "print('here')", 20); res.Status != wire.StatusOK {
				t.Fatalf("the other session's job: %s: %s %s", res.Status, res.Message, res.Stderr)
			}
			res := runDiskJob(t, fx, "prober-"+mode, "print(open('/proc/self/mountinfo').read())", 20)
			if res.Status != wire.StatusOK {
				t.Fatalf("probe: %s: %s %s", res.Status, res.Message, res.Stderr)
			}
			if strings.Contains(res.Stdout, other) {
				t.Errorf("a job's mount table names another session (%s):\n%s", other, res.Stdout)
			}
		})
	}
}

// TestJobSeesNoDiskCounters: every session has a loop device of its own,
// and /proc/diskstats gave each device's reads and writes, the host's and
// every other session's, as they happened; /proc/partitions listed them;
// /proc/fs/ext4/loopN/mb_groups gave each one's free blocks. A job sees
// none of them.
func TestJobSeesNoDiskCounters(t *testing.T) {
	needSessionFS(t)
	fx := newLifecycleFixture(t)
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		t.Run(mode, func(t *testing.T) {
			startDiskWorker(t, fx, mode)
			if res := runDiskJob(t, fx, "writer-"+mode, "open('f', 'wb').write(b'x' * (1 << 20))", 20); res.Status != wire.StatusOK {
				t.Fatalf("the other session's job: %s: %s %s", res.Status, res.Message, res.Stderr)
			}
			res := runDiskJob(t, fx, "counter-"+mode, `
import os
for p in ('/proc/diskstats', '/proc/partitions'):
    try:
        print(p, repr(open(p).read()))
    except OSError as e:
        print(p, 'unreadable', e.errno)
for d in ('/proc/fs', '/proc/fs/ext4', '/proc/fs/jbd2'):
    try:
        print(d, os.listdir(d))
    except OSError as e:
        print(d, 'unreadable', e.errno)
`, 20)
			if res.Status != wire.StatusOK {
				t.Fatalf("probe: %s: %s %s", res.Status, res.Message, res.Stderr)
			}
			if strings.Contains(res.Stdout, "loop") || !strings.Contains(res.Stdout, "/proc/diskstats") {
				t.Errorf("a job reads the disks' counters:\n%s", res.Stdout)
			}
		})
	}
}

// A job locks no page in memory. The page cache of a file is charged to the
// group of the job that first wrote or read it, for as long as the pages
// live; a process of the session outside that job (its context) that mapped
// the file and locked the pages once the job had ended kept them charged to
// the job's emptied group, where no reclaim could take them back, and the
// worker handed the group to another session's job: with 36 MiB of a 48 MiB
// file locked that way by six processes of a context, the next job of
// another session, given the group at 64 MiB, was killed at its memory
// limit after allocating less than 40 MiB. The group went back to the pool
// before the pages were locked, so no look at it then could tell.
// RLIMIT_MEMLOCK 0 refuses every way an unprivileged process locks pages.
func TestJobCannotLockMemory(t *testing.T) {
	needSessionFS(t)
	fx := newLifecycleFixture(t)
	for _, mode := range []string{ExecZygote, ExecSpawn} {
		t.Run(mode, func(t *testing.T) {
			startDiskWorker(t, fx, mode)
			res := runDiskJob(t, fx, "locker-"+mode, `
import ctypes, mmap, os
libc = ctypes.CDLL(None, use_errno=True)
def show(name, r):
    print(name, 'locked' if r == 0 else 'refused %d' % ctypes.get_errno())
with open('f', 'wb') as f:
    f.write(b'x' * 65536)
fd = os.open('f', os.O_RDONLY)
for name, m in (('file', mmap.mmap(fd, 65536, prot=mmap.PROT_READ)), ('anon', mmap.mmap(-1, 65536))):
    p = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m)) if name == 'anon' else 0)
    if name == 'file':
        for line in open('/proc/self/maps'):
            if line.rstrip().endswith('/f'):
                p = ctypes.c_void_p(int(line.split('-')[0], 16))
    show('mlock ' + name, libc.mlock(p, ctypes.c_size_t(4096)))
libc.mmap.restype = ctypes.c_void_p
r = libc.mmap(None, ctypes.c_size_t(4096), 3, 0x22 | 0x2000, -1, ctypes.c_long(0))  # MAP_PRIVATE|MAP_ANONYMOUS|MAP_LOCKED
print('MAP_LOCKED', 'refused %d' % ctypes.get_errno() if r in (None, 2**64 - 1) else 'locked')
show('mlockall', libc.mlockall(2))  # MCL_FUTURE
`, 20)
			if res.Status != wire.StatusOK {
				t.Fatalf("probe: %s: %s %s", res.Status, res.Message, res.Stderr)
			}
			if strings.Count(res.Stdout, "refused 1") != 4 {
				t.Errorf("a job locks pages in memory (want 4 refusals with EPERM):\n%s", res.Stdout)
			}
		})
	}
}
