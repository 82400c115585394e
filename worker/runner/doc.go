// Package runner runs one Python script in a fresh process and reports what
// happened: exit code or signal, captured output, timing.
//
// The worker runs each execution job, after it has written the job's script
// into the session's working directory and chosen the environment's
// interpreter, in one of two ways that return the same Outcome under the
// same limits:
//
//   - Run starts a fresh interpreter: `python script.py`.
//   - A Pool keeps, per interpreter and environment, a Zygote: a long-lived
//     interpreter that has imported a list of modules and forks one child
//     per job, so that a small job costs a fork instead of an interpreter
//     start and its imports. The child runs the script as `python
//     script.py` would (see zygote.py for what that takes). A job whose
//     zygote is not ready runs with Run; it never waits for one.
//
// Each way is an Executor (Spawn, Zygote, Pool, Fresh); the worker
// chooses one when it starts, and the tests run each shared case against
// every one (executor_test.go). Pool and Fresh keep the lifecycle contract
// (package internal/lifecycle): Start, then Stop, which ends every
// interpreter and goroutine they started.
//
// A fresh process per job, spawned or forked, is what keeps one job's state
// (globals, imported modules, monkey-patches, open files) from leaking into
// the next.
//
// What Run and Zygote.Run guarantee, whatever the script does:
//
//   - No shell: the argv is exactly [Spec.Python, Spec.Script] (a forked
//     child's sys.argv is [Spec.Script]), and the environment is exactly
//     Spec.Env (build it with ChildEnv, which copies only an allowlist from
//     the worker's own environment).
//   - The child leads its own process group (a forked child, its own
//     session). On timeout or cancellation the
//     whole group gets SIGKILL, and when the main process exits the group is
//     killed too, so nothing a job started in the background outlives it or
//     keeps its output pipes open. A process that leaves the group (setsid)
//     cannot hold Run hostage either: after the main process has exited, Run
//     waits at most a short, fixed delay for the pipes to drain.
//   - On Linux the child also gets SIGKILL if the worker dies (Pdeathsig), so
//     a crashed worker leaves no orphans behind (a zygote has it too, and
//     its children die with it). Pdeathsig fires when the OS
//     thread that started the child exits; Go keeps its threads alive unless a
//     goroutine that called runtime.LockOSThread returns, so do not call Run
//     from such a goroutine.
//   - stdin is /dev/null, so input() sees EOF at once instead of hanging.
//   - stdout and stderr are read concurrently, each into a buffer that keeps
//     the first OutputLimit bytes and counts and discards the rest. A script
//     that writes gigabytes costs the worker at most OutputLimit bytes per
//     stream, and never blocks on a full pipe.
//   - Spec.Rlimits are set before the script runs.
//   - With Spec.Confine, the job runs only in a sandboxed zygote (a Pool
//     with a SandboxConfig, or RunSandboxed and Fresh for one-shot ones), confined
//     to its session's directories and uid before any of its code runs;
//     see zygote.py and docs/architecture.md.
//
// A zygote whose imports started threads is unsafe to fork (a thread may
// hold a lock the child would inherit held): StartZygote refuses it with
// ErrZygoteUnsafe, and a Pool runs that environment with Run.
//
// Process control relies on Linux (waitid with WNOWAIT, Pdeathsig); on other
// systems the package builds but Run returns an error.
package runner
