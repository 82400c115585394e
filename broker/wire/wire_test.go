package wire

import "testing"

func TestWorkerSubjects(t *testing.T) {
	t.Parallel()
	if got := WorkerSubject("gpu", "w1"); got != "codexec.jobs.gpu.w.w1" {
		t.Errorf("WorkerSubject = %q", got)
	}
	if got := WorkerConsumerName("gpu", "w1"); got != "pool-gpu-w-w1" {
		t.Errorf("WorkerConsumerName = %q", got)
	}
	for _, ok := range []string{"w1", "host-01abc", "Host_2"} {
		if !ValidWorkerID(ok) {
			t.Errorf("%q refused", ok)
		}
	}
	for _, bad := range []string{"", "a.b", "a*", "a>", "a b", "-a"} {
		if ValidWorkerID(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}
