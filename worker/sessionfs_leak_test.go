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
