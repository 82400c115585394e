// Package worker consumes jobs from its pool's JetStream consumer and runs
// them.
//
// For each job a worker: skips a redelivered job if its result already
// exists (a crash that happened between storing the result and the ack),
// claims the job, or waits for the result of a live attempt that claimed
// it first (claim.go), refuses it if its deadline has passed (the frontend has stopped waiting),
// saves the script under the session's scripts directory, runs it in a fresh
// Python process (package runner) with the session's own working directory
// and a scrubbed environment, removes the script, stores the result (create-only, first result
// wins) and acks the message. In ExecZygote mode, the default, that process
// is forked from a warm interpreter of the job's environment (a zygote,
// started when the worker starts and whenever the environment is used
// without one, stopped when idle); in ExecSpawn mode it is a new
// interpreter. While a job runs the broker keeps the message's
// lease alive; a worker that dies mid-job stops doing so and JetStream hands
// the job to another worker after AckWait, which runs it once the dead
// worker's claim has lapsed.
//
// Jobs run confined (confine.go, see docs/architecture.md): in a
// bubblewrap sandbox under a uid of their session's own, in a cgroup of
// their own, under the limits of Config.Limits or the job's own up to
// Config.MaxLimits. Config.Sandbox decides what happens on a machine that
// cannot have the sandbox.
//
// Where things are: worker.go has the lifecycle (Start, Stop) and the
// table of handlers by job kind, after the checks every job passes (kind,
// scope, deadline); the execute handler is there too, and the pure
// classify (outcome.go) turns what its run reported into the result's
// status, limit and message. envs.go has the install and inspect handlers
// and environment builds; confine.go the sandbox, cgroups and limits. The
// executor (runner.Executor: spawn, fresh sandboxed interpreters, or a
// pool of zygotes) is chosen once, at Start.
//
// A worker also announces itself in the state store's presence set every
// HeartbeatInterval, so frontends can tell "no live worker" from "busy".
//
// Layout on the worker's disk, under DataDir:
//
//	envs/default-<hash>/      the default venv, built once per interpreter
//	sessions/                 mode 0711: jobs pass through, cannot list
//	sessions/<scope>/         a session's working directory (mode 0700, owned by its uid,
//	                          from the host's register of uids, Config.UIDDir)
//	scripts/<scope>/<id>_<name>.py   the script of each running job (ScriptsDir; the
//	                          directory 0500, owned by the session's uid, read-only in the sandbox),
//	                          removed when the job is over, before its result is stored
//	scripts/<scope>/.free-<id>       the emptied file of an ended job's script, which the
//	                          session's next job renames to its own (at most 8 per session)
package worker
