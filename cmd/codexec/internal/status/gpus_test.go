package status

import (
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
)

// A worker's GPUs are shown under the workers' table, busy ones marked;
// a cluster without GPUs shows no such line.
func TestTextShowsGPUs(t *testing.T) {
	now := time.Now()
	snap := Snapshot{At: now, Workers: []Worker{
		{ID: "w1", Pool: "gpu", Concurrency: 8, StartedAt: now, GPUWaiting: 3, GPUs: []envspec.GPU{
			{Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryMB: 81559, Busy: true},
			{Index: 1, Model: "NVIDIA A100-SXM4-40GB", MemoryMB: 20480, MIG: "3g.20gb"},
		}},
		{ID: "w2", Pool: "gpu", Concurrency: 8, StartedAt: now},
	}}
	var b strings.Builder
	if err := Text(&b, snap); err != nil {
		t.Fatal(err)
	}
	want := "w1 GPUs: 1/2 busy, 3 jobs waiting: 0 NVIDIA H100 80GB HBM3 81559 MiB (busy); 1 NVIDIA A100-SXM4-40GB 20480 MiB MIG 3g.20gb\n"
	if !strings.Contains(b.String(), want) || strings.Contains(b.String(), "w2 GPUs") {
		t.Errorf("text:\n%s\nwant the line %q and none for w2", b.String(), want)
	}
	snap.Workers = snap.Workers[1:]
	b.Reset()
	_ = Text(&b, snap)
	if strings.Contains(b.String(), "GPUs") {
		t.Errorf("a cluster without GPUs:\n%s", b.String())
	}
}
