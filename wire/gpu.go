package wire

import "github.com/codexec/codexec/envspec"

// GPUUsage is what a result says of the GPUs its job ran on (Result.GPU).
type GPUUsage struct {
	// Devices are the devices the job held, and saw alone.
	Devices []envspec.GPU `json:"devices"`
	// WaitMS is how long the job waited on the worker for them.
	WaitMS float64 `json:"wait_ms"`
	// PeakMemoryMB is the most GPU memory the job's processes used at once
	// on its devices together, in MiB, as the driver reported it while the
	// job ran (sampled); PeakReported false says the driver reported
	// nothing (no nvidia-smi, or no sample).
	PeakMemoryMB int64 `json:"peak_memory_mb,omitempty"`
	PeakReported bool  `json:"peak_reported"`
}
