package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/limits"
	"github.com/codexec/codexec/worker/runner"
	"github.com/codexec/codexec/worker/sandbox"
	"github.com/codexec/codexec/worker/seccomp"
	"github.com/oklog/ulid/v2"
)

// Config configures a Worker. The zero value of every field but DataDir is
// usable; WithDefaults fills them in.
type Config struct {
	// ID names this worker in results and presence records.
	// Default: "<hostname>-<random>".
	ID string
	// Pool is the worker pool whose jobs this worker consumes. Default "default".
	Pool string
	// DataDir holds the default venv and the sessions' working directories. Required.
	DataDir string
	// ScriptsDir is where each job's script is kept while the job runs. Default DataDir/scripts.
	ScriptsDir string
	// Python is the interpreter the default venv is built from: a path, a name
	// on PATH or a version such as "3.12". Default "python3".
	Python string
	// VenvPath, when set, names an existing venv used as the default
	// environment instead of building one.
	VenvPath string
	// Concurrency is how many jobs run at once. Default (defaultConcurrency):
	// ConcurrencyPerCPU per CPU, so that jobs waiting on I/O or sleeping do
	// not hold a CPU's place, but no more than the host's memory holds jobs
	// at their default memory limit, and never fewer than the CPUs.
	Concurrency int
	// BatchConcurrency is how many batch jobs run at once, in the slots
	// interactive jobs leave idle (batch.go). Default: a quarter of
	// Concurrency, at least 1; AllSlots: Concurrency.
	BatchConcurrency int
	// MaxTimeout caps any job's wall-clock limit. Default
	// wire.DefaultMaxTimeout (10 minutes), as the frontends'.
	MaxTimeout time.Duration
	// OutputLimit caps stdout and stderr, each, in bytes. Default 1 MiB.
	OutputLimit int64
	// EnvPassthrough names variables of the worker's own environment that jobs
	// may see (e.g. CUDA_VISIBLE_DEVICES). Default none.
	EnvPassthrough []string
	// EnvSet adds NAME=VALUE pairs to every job's environment.
	EnvSet map[string]string
	// ExecMode is how a job's interpreter comes to life: ExecZygote forks it
	// from a warm interpreter of its environment that has done its imports
	// (falling back to ExecSpawn while that starts, or when it cannot be
	// used), ExecSpawn starts a fresh one per job. Default ExecZygote.
	ExecMode string
	// Preload lists the modules a warm interpreter imports before it forks.
	// Nil means runner.DefaultPreload; an empty, non-nil slice, nothing.
	Preload []string
	// MaxZygotes caps the warm interpreters alive at once. Default 4.
	MaxZygotes int
	// ZygoteIdle stops a warm interpreter that ran no job for this long.
	// Default 10 minutes.
	ZygoteIdle time.Duration
	// MaxContexts caps the contexts (live interpreters of sessions) this
	// worker holds; the least recently used idle one makes room. Default
	// DefaultMaxContexts.
	MaxContexts int
	// ContextIdle ends a context that ran nothing for this long. Default
	// DefaultContextIdle.
	ContextIdle time.Duration
	// ContextMemory bounds the sum of the memory limits of the contexts
	// this worker holds: a context keeps its memory between calls without
	// holding a job slot, so nothing else counts it. A new context past it
	// ends idle ones (least recently used of the owner holding the most
	// first), or is refused; a context without a memory limit counts as
	// all of it. Default (0): half the host's memory (none when unknown);
	// negative: no bound.
	ContextMemory int64
	// EnvBudget is the disk the cache of built environments (DataDir/envs/cache)
	// may use; least recently used ones are evicted past it. 0 means
	// envcache.DefaultBudgetBytes (20 GiB); negative, no limit.
	EnvBudget int64
	// InstallerCacheBudget bounds pip's and uv's caches (DataDir/envcache/
	// pip-cache, uv-cache): past it, after a build, they are emptied (see
	// envcache.Cache.PruneInstallerCaches). 0 means
	// envcache.DefaultInstallerCacheBytes (5 GiB); negative, no limit.
	InstallerCacheBudget int64
	// Managers names the environment managers this worker offers (venv, uv,
	// conda); those not available on the machine are left out. Default all
	// three.
	Managers []string
	// Pythons are the Python versions it offers for environments
	// ("3.11", "3.12"). Default: those found among 3.8 to 3.14.
	Pythons []string
	// Index says where pip and uv get packages: index URL, extra indexes,
	// find-links, no-index (private mirrors, air-gapped clusters).
	Index envcache.IndexConfig
	// FetchUV installs uv from the package index into DataDir/tools/uv at
	// start when the uv manager is offered and no uv is installed, so that
	// environments get uv's fast installs on a fresh machine. Off, such a
	// worker builds environments with venv and pip.
	FetchUV bool
	// AllowURLRequirements permits "name @ https://..." packages.
	AllowURLRequirements bool
	// Labels are the operator's labels advertised for placement ("gpu": "1").
	Labels map[string]string
	// ExistingEnvs name environments that exist on this worker (venv paths,
	// conda names or prefixes) that sessions may select with
	// configure_environment; they are advertised, never modified.
	ExistingEnvs []string
	// Limits are the resource limits of a job that asks for nothing else
	// (wire.Job.Limits replaces them field by field); a zero field is no
	// limit. MaxLimits are the most a job may ask for; a zero field is no
	// maximum. Limits must be within MaxLimits. Default: when both are the
	// zero Set and ExplicitLimits is false, limits.Default and
	// limits.DefaultMax.
	Limits, MaxLimits limits.Set
	// ExplicitLimits says Limits and MaxLimits are meant as they are, zero
	// Sets included (an operator's "none": no limits at all). The CLI, which
	// always fills both, sets it.
	ExplicitLimits bool
	// Sandbox says whether jobs run in a sandbox. SandboxAuto
	// (the default) and SandboxRequire both refuse to start without a
	// working one: a worker that silently ran jobs unconfined, as its own
	// user (root, on most servers), would let any caller read what the
	// worker can. SandboxOff, which an operator must ask for, runs jobs
	// without it.
	Sandbox string
	// Bwrap is the bubblewrap binary: a path or a name on PATH. Default
	// "bwrap".
	Bwrap string
	// SandboxLauncher builds the sandboxes: sandbox.LauncherBuiltin (this
	// program, nothing to install), sandbox.LauncherBwrap (bubblewrap, at
	// Bwrap) or sandbox.LauncherAuto, the default: the built-in one, or
	// bubblewrap where only bubblewrap works.
	SandboxLauncher string
	// JobNetwork is the network of the jobs that run code: NetworkNone, a
	// private loopback only, or NetworkAllow, the worker's own network.
	// Install jobs always get network. Default NetworkNone.
	JobNetwork string
	// SandboxReadOnly are extra host paths (absolute) bound read-only into
	// every sandbox, e.g. a shared data set.
	SandboxReadOnly []string
	// SandboxDevices are device nodes (absolute paths under /dev) bound into
	// every sandbox, e.g. /dev/nvidia0.
	SandboxDevices []string
	// GPUs are the devices this worker offers jobs that ask for GPUs
	// (worker/gpu.Select): "all" (the default: every NVIDIA GPU found at
	// start-up, none on a machine without), "none", or indices and UUIDs.
	// GPURoot is where the device tree and the driver's files are read
	// (default "/"); NvidiaSMI the nvidia-smi asked (default "nvidia-smi",
	// "none" for none).
	GPUs, GPURoot, NvidiaSMI string
	// UIDDir is the register of the uids given to sessions (worker root
	// and sandboxed): one per host, shared by every worker on it whatever
	// its DataDir, so that two workers never give one uid to two sessions
	// (see sandbox.UIDs). Default sandbox.DefaultUIDDir.
	UIDDir string
	// SeccompAllow names system calls that the sandboxed jobs' seccomp
	// filter refuses and that this worker's jobs may make after all, e.g.
	// "ptrace" for a debugger: names of seccomp.Refused or
	// seccomp.Conditional. Default none.
	SeccompAllow []string
	// SessionFS says how a job's disk limit holds: SessionFSAuto (the
	// default) gives each session's working directory a file system of its
	// own, which refuses a write past the limit (package diskfs), where the
	// worker can make them (root, loop devices, mkfs.ext4), and otherwise
	// measures the directory while the job runs, as SessionFSOff always
	// does (a sample, which a fast writer can outrun between two).
	SessionFS string
	// SessionFSSize is the size of each session's file system, a sparse
	// image that takes on the host's disk what is written in it. It bounds
	// what a session may hold under any limit. Default: the largest disk
	// limit a job may ask for plus a sixteenth and 256 MiB (the file
	// system's own overhead); 64 GiB when there is no largest.
	SessionFSSize int64
	// SessionFSMounted bounds the sessions' file systems mounted at once
	// (each holds a loop device): the least recently used idle one makes
	// room. Default 128.
	SessionFSMounted int
	// SessionFSIdle unmounts a session's file system that ran no job for
	// this long. Default 10 minutes.
	SessionFSIdle time.Duration
	// HeartbeatInterval is how often the worker renews its presence. Default 2s;
	// the presence record lives three intervals, so a dead worker's
	// targeted jobs go to the pool about 6s after its death.
	HeartbeatInterval time.Duration
	// Keys builds state-store keys. Default prefix statestore.DefaultPrefix.
	Keys statestore.Keys
	// LocalWorkspaces keeps the sessions' working directories on this
	// worker only: no snapshots, no holder records (workspaces.go). For a
	// worker that is the only one of its pool, as in `codexec dev`, where a
	// snapshot would only copy the data directory into itself.
	LocalWorkspaces bool
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
}

// Defaults.
const (
	DefaultOutputLimit int64 = 1 << 20
	DefaultHeartbeat         = 2 * time.Second
)

// Exec modes.
const (
	ExecZygote = "zygote"
	ExecSpawn  = "spawn"
)

// Sandbox modes (Config.Sandbox). SandboxAuto is SandboxRequire: it was
// once "sandbox when possible" and now fails closed; the name stays so that
// existing configurations keep working, and keep being safe.
const (
	SandboxAuto    = "auto"
	SandboxRequire = "require"
	SandboxOff     = "off"
)

// Disk limit modes (Config.SessionFS).
const (
	SessionFSAuto = "auto"
	SessionFSOff  = "off"
)

// Defaults of the sessions' file systems.
const (
	DefaultSessionFSMounted = 128
	DefaultSessionFSIdle    = 10 * time.Minute
)

// Job network policies (Config.JobNetwork).
const (
	NetworkNone  = "none"
	NetworkAllow = "allow"
)

// WithDefaults returns c with every unset field given its default.
func (c Config) WithDefaults() Config {
	if c.ID == "" {
		host, _ := os.Hostname()
		host = strings.ToLower(strings.SplitN(host, ".", 2)[0])
		if host == "" {
			host = "worker"
		}
		c.ID = host + "-" + strings.ToLower(ulid.Make().String()[20:])
	}
	if c.Pool == "" {
		c.Pool = wire.DefaultPool
	}
	if c.ScriptsDir == "" && c.DataDir != "" {
		c.ScriptsDir = filepath.Join(c.DataDir, "scripts")
	}
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.MaxTimeout <= 0 {
		c.MaxTimeout = wire.DefaultMaxTimeout
	}
	if c.OutputLimit <= 0 {
		c.OutputLimit = DefaultOutputLimit
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeat
	}
	if c.Keys.Prefix == "" {
		c.Keys.Prefix = statestore.DefaultPrefix
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ExecMode == "" {
		c.ExecMode = ExecZygote
	}
	if c.MaxZygotes <= 0 {
		c.MaxZygotes = runner.DefaultMaxZygotes
	}
	if c.ZygoteIdle <= 0 {
		c.ZygoteIdle = runner.DefaultZygoteIdle
	}
	if c.MaxContexts <= 0 {
		c.MaxContexts = DefaultMaxContexts
	}
	if c.ContextIdle <= 0 {
		c.ContextIdle = DefaultContextIdle
	}
	if c.ContextMemory == 0 {
		c.ContextMemory = hostMemory() / 2
	}
	if !c.ExplicitLimits && c.Limits.IsZero() && c.MaxLimits.IsZero() {
		c.Limits, c.MaxLimits = limits.Default, limits.DefaultMax
	}
	if c.Concurrency <= 0 {
		c.Concurrency = defaultConcurrency(runtime.NumCPU(), hostMemory(), c.Limits.Memory)
	}
	switch {
	case c.BatchConcurrency == AllSlots || c.BatchConcurrency > c.Concurrency:
		c.BatchConcurrency = c.Concurrency
	case c.BatchConcurrency <= 0:
		c.BatchConcurrency = max(1, c.Concurrency/4)
	}
	if c.Sandbox == "" {
		c.Sandbox = SandboxAuto
	}
	if c.SandboxLauncher == "" {
		c.SandboxLauncher = sandbox.LauncherAuto
	}
	if c.UIDDir == "" {
		c.UIDDir = sandbox.DefaultUIDDir
	}
	if c.JobNetwork == "" {
		c.JobNetwork = NetworkNone
	}
	if c.SessionFS == "" {
		c.SessionFS = SessionFSAuto
	}
	if c.SessionFSSize <= 0 {
		c.SessionFSSize = 64 << 30
		if largest := c.MaxLimits.Disk; largest > 0 {
			c.SessionFSSize = largest + largest/16 + 256<<20
		}
	}
	if c.SessionFSMounted <= 0 {
		c.SessionFSMounted = DefaultSessionFSMounted
	}
	if c.SessionFSIdle <= 0 {
		c.SessionFSIdle = DefaultSessionFSIdle
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data directory is required"))
	}
	if c.ExecMode != ExecZygote && c.ExecMode != ExecSpawn {
		errs = append(errs, fmt.Errorf("invalid exec mode %q: %s or %s", c.ExecMode, ExecZygote, ExecSpawn))
	}
	if !wire.ValidPool(c.Pool) {
		errs = append(errs, fmt.Errorf("invalid pool name %q: use lower-case letters, digits, '-' and '_', at most 32 characters", c.Pool))
	}
	switch c.Sandbox {
	case SandboxAuto, SandboxRequire, SandboxOff:
	default:
		errs = append(errs, fmt.Errorf("invalid sandbox mode %q: %s, %s or %s", c.Sandbox, SandboxAuto, SandboxRequire, SandboxOff))
	}
	switch c.SandboxLauncher {
	case sandbox.LauncherAuto, sandbox.LauncherBuiltin, sandbox.LauncherBwrap:
	default:
		errs = append(errs, fmt.Errorf("invalid sandbox launcher %q: %s, %s or %s", c.SandboxLauncher, sandbox.LauncherAuto, sandbox.LauncherBuiltin, sandbox.LauncherBwrap))
	}
	switch c.SessionFS {
	case SessionFSAuto, SessionFSOff:
	default:
		errs = append(errs, fmt.Errorf("invalid session file system mode %q: %s or %s", c.SessionFS, SessionFSAuto, SessionFSOff))
	}
	switch c.JobNetwork {
	case NetworkNone, NetworkAllow:
	default:
		errs = append(errs, fmt.Errorf("invalid job network %q: %s or %s", c.JobNetwork, NetworkNone, NetworkAllow))
	}
	if err := c.Limits.Check(c.MaxLimits); err != nil {
		errs = append(errs, fmt.Errorf("limits: %w", err))
	}
	for _, p := range c.SandboxReadOnly {
		if !filepath.IsAbs(p) {
			errs = append(errs, fmt.Errorf("sandbox read-only path %q is not absolute", p))
		}
	}
	if err := seccomp.Check(c.SeccompAllow); err != nil {
		errs = append(errs, err)
	}
	for _, p := range c.SandboxDevices {
		if !filepath.IsAbs(p) || !strings.HasPrefix(filepath.Clean(p), "/dev/") {
			errs = append(errs, fmt.Errorf("sandbox device %q is not an absolute path under /dev", p))
		}
	}
	for k, v := range c.Labels {
		if !labelRe.MatchString(k) || v == "" || strings.ContainsAny(v, ",= \t\n") {
			errs = append(errs, fmt.Errorf("invalid label %q=%q: use KEY=VALUE with letters, digits, '.', '_', '-' in the key", k, v))
		}
	}
	return errors.Join(errs...)
}

var labelRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ConcurrencyPerCPU is how many jobs a worker runs at once per CPU by
// default. Busy jobs share the CPUs (each job's cgroup has the same CPU
// weight, see worker/cgroup), so more of them each run slower; jobs that
// sleep or wait on I/O cost no CPU, and with one job per CPU they used to
// queue behind each other for nothing.
const ConcurrencyPerCPU = 4

// defaultConcurrency is ConcurrencyPerCPU × cpus, bounded by how many jobs
// at their default memory limit (jobMem) hostMem holds, so that jobs within
// their defaults cannot together exhaust the host; never fewer than cpus.
// An unknown hostMem or jobMem (0) bounds nothing.
func defaultConcurrency(cpus int, hostMem, jobMem int64) int {
	n := ConcurrencyPerCPU * cpus
	if hostMem > 0 && jobMem > 0 {
		n = min(n, int(hostMem/jobMem))
	}
	return max(n, cpus, 1)
}

// hostMemory returns the host's memory in bytes (MemTotal of
// /proc/meminfo), or 0 where it cannot be read.
func hostMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
