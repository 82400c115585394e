// Package runner runs one Python script in a fresh process and reports what
// happened: exit code or signal, captured output, timing.
//
// The worker calls Run once per execution job, after it has written the job's
// script into the session's working directory and chosen the environment's
// interpreter. A fresh process per job is what keeps one job's state (globals,
// imported modules, monkey-patches, open files) from leaking into the next.
// Later a worker will keep, per hot environment, a pre-started "zygote"
// interpreter that has done its imports and forks a child per job; the limits
// and the Outcome stay the same, only the way the process comes to life
// changes.
//
// What Run guarantees, whatever the script does:
//
//   - No shell: the argv is exactly [Spec.Python, Spec.Script], and the
//     environment is exactly Spec.Env (build it with ChildEnv, which copies
//     only an allowlist from the worker's own environment).
//   - The child leads its own process group. On timeout or cancellation the
//     whole group gets SIGKILL, and when the main process exits the group is
//     killed too, so nothing a job started in the background outlives it or
//     keeps its output pipes open. A process that leaves the group (setsid)
//     cannot hold Run hostage either: after the main process has exited, Run
//     waits at most a short, fixed delay for the pipes to drain.
//   - On Linux the child also gets SIGKILL if the worker dies (Pdeathsig), so
//     a crashed worker leaves no orphans behind. Pdeathsig fires when the OS
//     thread that started the child exits; Go keeps its threads alive unless a
//     goroutine that called runtime.LockOSThread returns, so do not call Run
//     from such a goroutine.
//   - stdin is /dev/null, so input() sees EOF at once instead of hanging.
//   - stdout and stderr are read concurrently, each into a buffer that keeps
//     the first OutputLimit bytes and counts and discards the rest. A script
//     that writes gigabytes costs the worker at most OutputLimit bytes per
//     stream, and never blocks on a full pipe.
//
// Process control relies on Linux (waitid with WNOWAIT, Pdeathsig); on other
// systems the package builds but Run returns an error.
package runner
