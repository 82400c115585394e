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
