// Package limits holds the resource limits of a job: the operator's defaults
// and maximums (the worker's --limits and --max-limits), the per-call
// overrides a client sends (wire.Limits), and how a Set becomes rlimits for
// the runner.
//
// A Set is written as comma-separated key=value pairs,
//
//	memory=1GiB,cpu=10m,procs=256,fsize=1GiB,disk=2GiB,nofile=1024
//
// with these keys:
//
//	memory  bytes for all processes of the job together (cgroup), or per
//	        process address space (RLIMIT_AS) where the worker has no cgroup
//	cpu     CPU time per process (RLIMIT_CPU): a Go duration ("90s", "5m")
//	        or plain seconds ("90")
//	procs   processes and threads (cgroup pids, RLIMIT_NPROC)
//	fsize   largest file a job may write (RLIMIT_FSIZE)
//	disk    bytes used in the session's working directory
//	nofile  open descriptors per process (RLIMIT_NOFILE)
//
// Sizes are plain bytes or a whole number with a unit, case-insensitive:
// KiB, MiB, GiB, TiB and the bare K, M, G, T are powers of 1024; KB, MB,
// GB, TB are powers of 1000. internal/units reads them, as it reads
// codexec's other size flags (--output-limit 1M). Fractions
// are not accepted ("1.5GiB": write 1536MiB). A value must be more than
// zero; "key=none" means no limit, and "none" alone means no limits at all.
// Set.String writes the canonical form, which Parse reads back.
//
// The worker resolves each job's limits with Resolve: a per-call value
// replaces the default, and a value above the pool's maximum refuses the
// job with a RequestError that names the parameter in the client's units.
package limits
