// Package cgroup puts each job of a worker in a Linux control group of its
// own, so that the job's memory and process limits hold for everything it
// starts.
//
// # Why cgroups
//
// rlimits are per process: RLIMIT_AS bounds one process's address space,
// and a job that forks ten children gets ten times its memory; RLIMIT_NPROC
// counts the processes of a user, not of a job. A cgroup's memory and pids
// controllers count every process and thread of the group together, charge
// the memory really used (page cache included) rather than address space,
// and are inherited by every child, whatever it does (a new session, a
// double fork) to leave its process group. When the group passes its memory limit, the kernel's
// OOM killer kills one of its processes, not a random one of the host;
// when it reaches its pids limit, fork and thread creation fail with
// EAGAIN, so a fork bomb stays inside the job. Membership also gives Kill
// its reach: every process of the job is listed in the group, which no
// process group or session can guarantee.
//
// # Layout
//
// Detect creates the worker's parent groups, codexec/<name>, inside the
// worker's own cgroup, so the limits the operator gave the worker still
// cover its jobs, and New creates one group per job inside them:
//
//	<worker's cgroup>/codexec/<worker name>/<job>
//
// A group per job, created before the job starts and removed after it,
// makes the counters (Usage) the job's alone and lets Kill and Remove find
// exactly its processes.
//
// # v1 and v2
//
// Detect reads /proc/self/mountinfo and /proc/self/cgroup to find the
// worker's cgroup, and prefers v2 where the v2 hierarchy offers both the
// memory and the pids controller; otherwise it uses the v1 hierarchies that
// hold them (a host may mount cgroup2 without controllers next to v1, as
// hybrid systems do). The differences it hides:
//
//   - v1 has one hierarchy per controller (or group of controllers), so a
//     job has one directory per hierarchy and a process joins each; v2 has
//     one directory.
//   - v2 enables controllers for a cgroup's children in its
//     cgroup.subtree_control, and only in a cgroup that holds no processes
//     itself (the root excepted): the "no internal processes" rule. The
//     worker's own cgroup holds the worker, so Detect moves the worker into
//     a leaf, codexec-worker, next to codexec; if other processes remain,
//     Detect fails: run the worker in a cgroup of its own (systemd:
//     Delegate=yes).
//   - Files: v1 memory.limit_in_bytes, memory.memsw.limit_in_bytes (memory
//     plus swap, present where the kernel accounts swap),
//     memory.oom_control's oom_kill count, memory.max_usage_in_bytes; v2
//     memory.max, memory.swap.max, memory.events' oom_kill, memory.peak.
//     Both have pids.max and pids.events.
//   - Killing: v2 (Linux 5.14 on) has cgroup.kill, which kills every
//     process of a group at once; on v1 Kill signals the listed processes
//     and reads the list again until it is empty, catching what they forked
//     meanwhile (the pids limit bounds how many that can be).
//
// # Joining from inside a sandbox
//
// The worker can move a process it started into a group with Group.Add,
// but the process may have run by then. A sandboxed job instead joins its
// group itself, before it runs anything of the job's: the sandbox binds
// Manager.Dirs read-write, and the process writes "0" into each of
// Group.ProcsFiles, in their order: the pids controller's group first, so
// that a group whose pids.current is 0 holds no process in any controller
// and Kill need not read each cgroup.procs to know it is empty. "0" means
// the writer itself; a pid would be wrong,
// since inside a new pid namespace the process's pid (often 1) is not the
// number the cgroup files use on the worker's side. The write needs
// privilege over the file (root, not in a user namespace of its own), so
// it is done before the sandbox drops it.
//
// # Without cgroups
//
// Detect's error wraps ErrUnavailable when cgroups cannot be used: not
// Linux, no memory or pids controller, a read-only cgroup filesystem, a v2
// cgroup shared with other processes. The caller then falls back to
// per-process rlimits (RLIMIT_AS, RLIMIT_NPROC), which are weaker as said
// above.
package cgroup
