package status

import (
	"fmt"
	"strings"
)

// gpuLines says, under the workers' table, what each worker with GPUs
// offers: how many of its devices are busy, how many jobs wait, and each
// device. Nothing for a cluster without GPUs.
func gpuLines(workers []Worker) string {
	var b strings.Builder
	for _, wk := range workers {
		if len(wk.GPUs) == 0 {
			continue
		}
		if b.Len() == 0 {
			b.WriteString("\n")
		}
		busy := 0
		var devs []string
		for _, g := range wk.GPUs {
			d := fmt.Sprintf("%d %s %d MiB", g.Index, dash(g.Model), g.MemoryMB)
			if g.MIG != "" {
				d += " MIG " + g.MIG
			}
			if g.Busy {
				busy++
				d += " (busy)"
			}
			devs = append(devs, d)
		}
		fmt.Fprintf(&b, "%s GPUs: %d/%d busy, %s waiting: %s\n", wk.ID, busy, len(wk.GPUs), plural(wk.GPUWaiting, "job"), strings.Join(devs, "; "))
	}
	return b.String()
}
