package runner

import (
	_ "embed"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/codexec/codexec/worker/sandbox"
)

// zygoteSource is the zygote's Python code. The bootstrap passed with -c
// reads it as the first datagram on the control socket (fd 3), so the
// command line stays short and the zygote's frames carry a name of their own
// ("<codexec-zygote>") that the child strips from tracebacks.
//
//go:embed zygote.py
var zygoteSource []byte

// richoutSource is the rich-output module each zygote compiles:
// display(), and matplotlib figures as pictures.
//
//go:embed richout.py
var richoutSource string

// zygoteCode is what the worker sends a zygote first: a line that sets
// _RICHOUT_SOURCE (a JSON string is a Python string literal), then
// zygote.py. Not in the zygote's argv, which every job's /proc/self/cmdline
// shows.
var zygoteCode = func() []byte {
	lit, _ := json.Marshal(richoutSource)
	return append([]byte("_RICHOUT_SOURCE = "+string(lit)+"\n"), zygoteSource...)
}()

// zygoteBootstrap is the zygote's -c argument.
const zygoteBootstrap = "import socket;_ctl=socket.socket(fileno=3);" +
	"exec(compile(_ctl.recv(1<<20),'<codexec-zygote>','exec'))"

// maxZygoteRequest is the largest run request the zygote reads (its
// recvmsg buffer); a job whose request would be larger runs with spawn.
const maxZygoteRequest = 1<<20 - 1

// DefaultPreload is what a zygote imports when nothing else is configured:
// standard-library modules that generated code imports often and that start
// no threads. Together they cost a fresh interpreter about a hundred
// milliseconds; a zygote pays that once.
var DefaultPreload = []string{
	"abc", "argparse", "asyncio", "base64", "bisect", "collections", "contextlib", "copy", "csv",
	"dataclasses", "datetime", "decimal", "email.message", "enum", "fractions", "functools",
	"glob", "hashlib", "heapq", "http.client", "io", "itertools", "json", "logging", "math",
	"operator", "os", "pathlib", "pprint", "random", "re", "shutil", "statistics", "string",
	"struct", "subprocess", "tempfile", "textwrap", "threading", "time", "traceback", "typing",
	"unittest", "urllib.parse", "urllib.request", "uuid", "zlib",
}

// Defaults of ZygoteConfig and PoolConfig.
const (
	DefaultZygoteStartTimeout = 2 * time.Minute
	DefaultMaxZygotes         = 4
	DefaultZygoteIdle         = 10 * time.Minute
)

// zygoteKillGrace is how long a job waits for the zygote to report its
// child's exit after asking for a kill, before it gives up on the zygote.
const zygoteKillGrace = 5 * time.Second

var (
	// ErrZygoteUnsafe is returned by StartZygote when the preloaded imports
	// started threads: forking such a process can copy a lock that another
	// thread holds, so the zygote is stopped instead.
	ErrZygoteUnsafe = errors.New("runner: zygote is unsafe to fork: its imports started threads")
	// ErrNotStarted is wrapped by Zygote.Run's error when the job never
	// started (the zygote is gone, or could not fork): running it another
	// way is safe.
	ErrNotStarted = errors.New("runner: job not started")
	// ErrZygoteDied is wrapped by Zygote.Run's error when the zygote died
	// while the job ran; the job's processes were killed.
	ErrZygoteDied = errors.New("runner: the zygote died while the job ran")
)

// ZygoteConfig says how to start a zygote.
type ZygoteConfig struct {
	// Python is the absolute path of the interpreter.
	Python string
	// Env is the zygote's environment, the one preloaded modules see when
	// they are imported: usually ChildEnv without a home directory. Each
	// job's child replaces it with its Spec.Env.
	Env []string
	// Preload lists the modules to import before forking. A module that
	// fails to import is reported in ZygoteInfo.Failed and skipped.
	Preload []string
	// StartTimeout bounds the start, imports included. Default 2 minutes.
	StartTimeout time.Duration
	// Logger receives what the zygote writes to its stdout and stderr.
	// Default slog.Default().
	Logger *slog.Logger
	// Sandbox, when set, starts the zygote in a bubblewrap sandbox, and
	// then every job it runs must carry a Spec.Confine.
	Sandbox *SandboxConfig
	// OneShot says the zygote will run one job and be stopped (Fresh): a
	// sandboxed one then keeps one spare instead of two.
	OneShot bool
	// TrustSite lets the environment's start-up code (its .pth files'
	// import lines, sitecustomize) run in the zygote, once, as at any
	// interpreter's start (Spec.TrustSite). Otherwise the zygote starts
	// with -S and each job runs that code, in its sandbox.
	TrustSite bool
}

// SandboxConfig says how sandboxed zygotes are started.
type SandboxConfig struct {
	// Box builds the bubblewrap command line.
	Box *sandbox.Sandbox
	// Mounts are what every sandboxed zygote sees besides its interpreter
	// and environment: the roots of the sessions' directories (writable,
	// each job binds back its own) and the job cgroups' directories.
	Mounts []sandbox.Mount
	// Hidden are the roots, among Mounts, that no job sees: each job sees
	// only its Confinement.Binds under them.
	Hidden []string
	// Seccomp, when set, is the system-call filter every job runs under
	// (worker/seccomp.Program: an array of struct sock_filter). Each job's
	// process installs it as its last step before the job's code, after
	// its namespaces, mounts and privilege drop, which need the calls it
	// refuses; bubblewrap's --seccomp would filter the zygote itself.
	Seccomp []byte
	// HostCgroupNS keeps the zygote in the host's cgroup namespace
	// (sandbox.Options.HostCgroupNS): where the job cgroups are on
	// cgroup v2, which a process in a namespace of its own cannot join.
	HostCgroupNS bool
	// interpreterInit keeps the path of machines where zygote.py's small
	// init cannot run (each spare the init of its PID namespace, forking
	// the job's process), so that tests cover it here too.
	interpreterInit bool
	// noClones keeps the path of workers that cannot make mount clones
	// (zygoteSandboxCfg.Clones: rootless, Linux before 5.12, another
	// machine), so that tests cover it here too.
	noClones bool
}

// zygoteCaps are the capabilities a sandboxed zygote keeps, for its
// children's confinement: mounts and namespaces (SYS_ADMIN), the uid
// change (SETUID, SETGID), killing jobs that run under other uids (KILL)
// and bringing a new loopback up (NET_ADMIN). A child loses them all when
// it changes uid.
var zygoteCaps = []string{"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_NET_ADMIN"}

// ZygoteInfo describes a started zygote.
type ZygoteInfo struct {
	// PID is the zygote's process id.
	PID int
	// Version is the interpreter's version, e.g. "3.12.1".
	Version string
	// Preloaded lists the modules imported; Failed maps the ones that
	// failed to their error.
	Preloaded []string
	Failed    map[string]string
	// ImportTime is what the preloads cost; StartTime the whole start.
	ImportTime, StartTime time.Duration
	// Keeper says whether a job's process leaves its address space to a
	// keeper when it ends, so that its exit is quick (zygote.py:
	// _keep_address_space; x86-64 only).
	Keeper bool
}
