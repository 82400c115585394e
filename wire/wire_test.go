package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

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

func TestLimitsJSON(t *testing.T) {
	t.Parallel()
	j := Job{Limits: &Limits{MemoryMB: 1, CPUSeconds: 2, Processes: 3, FileSizeMB: 4, DiskMB: 5, OpenFiles: 6}}
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	want := `"limits":{"memory_mb":1,"cpu_seconds":2,"processes":3,"file_size_mb":4,"disk_mb":5,"open_files":6}`
	if !strings.Contains(string(raw), want) {
		t.Errorf("job %s lacks %s", raw, want)
	}
	raw, _ = json.Marshal(Job{Limits: &Limits{DiskMB: 5}})
	if !strings.Contains(string(raw), `"limits":{"disk_mb":5}`) {
		t.Errorf("zero fields not omitted: %s", raw)
	}
	raw, _ = json.Marshal(Job{})
	if strings.Contains(string(raw), "limits") {
		t.Errorf("nil limits not omitted: %s", raw)
	}
	raw, _ = json.Marshal(Result{Limit: LimitMemory})
	if !strings.Contains(string(raw), `"limit":"memory"`) {
		t.Errorf("result %s", raw)
	}
	raw, _ = json.Marshal(Result{})
	if strings.Contains(string(raw), `"limit"`) {
		t.Errorf("empty limit not omitted: %s", raw)
	}
}
