// Package gpu finds a worker's NVIDIA GPUs and leases them to jobs.
//
// Discover reads the device tree (dev/nvidia<N> and the driver's control
// nodes), the driver's own description of each GPU
// (proc/driver/nvidia/gpus/*/information) and, where it is installed,
// nvidia-smi (models, memory, MIG instances), all under a root directory
// that tests point at a fixture. Select keeps what the operator offers
// (--gpus). An Allocator leases devices one job per device, the waiting
// jobs served in arrival order; a Lease says which nodes the job's
// sandbox binds and which variables name its devices. PeakMemory samples
// what the driver reports of the memory used on a job's devices.
//
// Nothing here has been run against a real GPU in this repository's
// tests: they run against fake device trees and a fake nvidia-smi
// (testdata), see docs/gpu.md.
package gpu
