package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"
)

// DefaultOutputLimit is the cap on stdout and on stderr, each, when
// Spec.OutputLimit is not positive.
const DefaultOutputLimit = 1 << 20

// pipeDrainDelay bounds how long Run waits for the output pipes to reach EOF
// once the main process has exited and its group has been killed. Only a
// process that left the group (setsid) can keep them open that long; what it
// writes afterwards is lost. It must be long enough for the copying
// goroutines to drain what the pipes already hold on a loaded machine.
const pipeDrainDelay = time.Second

// Spec says what to run and under which limits.
type Spec struct {
	// Python is the absolute path of the interpreter.
	Python string
	// TrustSite says that no session installs into Python's environment
	// (the worker's own base environment, made by it or by its operator),
	// so that the environment's start-up code (.pth import lines,
	// sitecustomize) may run once in the zygote of a Pool, which is
	// privileged, instead of in each job: any package a session installs
	// can bring such code.
	TrustSite bool
	// Script is the absolute path of the already-written script file.
	Script string
	// Dir is the working directory; it must exist.
	Dir string
	// Env is the complete environment of the child, usually from ChildEnv.
	// Nil means an empty environment: the worker's own is never inherited.
	Env []string
	// Timeout is the wall-clock limit, counted from the start of the process;
	// when it passes the whole process group is killed. Zero or negative
	// means no limit.
	Timeout time.Duration
	// OutputLimit caps the bytes kept from stdout and from stderr, each:
	// the first half and the last half of a longer stream.
	// Zero or negative means DefaultOutputLimit.
	OutputLimit int64
	// Spill, when set, is called with "stdout" or "stderr" the first time
	// that stream passes OutputLimit; the writer it returns (nil: none)
	// receives the whole stream from its first byte, until a write to it
	// fails. The caller closes it once Run has returned.
	Spill func(stream string) io.Writer
	// Watch, when set, is called with "stdout" or "stderr" and each piece
	// of output as the job writes it, from the goroutines copying its
	// pipes (the two streams at once; it must not keep p, nor block).
	Watch func(stream string, p []byte)
	// Rlimits are resource limits of the child (setrlimit(2)); the rest
	// are the worker's own. A zygote's child sets them before any job code
	// runs; Run sets them with prlimit(2) right after the interpreter
	// started, long before it reaches the script.
	Rlimits []Rlimit
	// Preload names the modules a zygote for this job's interpreter and
	// environment imports before forking; nil means the Pool's default.
	// Run ignores it.
	Preload []string
	// Confine, when set, confines the job in a sandbox: it runs only in a
	// sandboxed zygote (a Pool with a SandboxConfig, or RunSandboxed),
	// never unconfined.
	Confine *Confinement
}

// Confinement says how a job in a sandboxed zygote is confined: what it
// sees of the sandbox's file system, the cgroups it joins and the uid it
// becomes. See zygote.py (_confine, _drop_privileges).
type Confinement struct {
	// UID and GID the job runs as; both must be above 0.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Binds are directories under the sandbox's Hidden roots bound back
	// into the job's view, at the same path (the session's own).
	Binds []Bind `json:"binds,omitempty"`
	// Cgroups are cgroup.procs files the job joins before it drops its
	// privileges; Unmount are directories then removed from its view.
	Cgroups []string `json:"cgroups,omitempty"`
	Unmount []string `json:"unmount,omitempty"`
	// TmpSize caps the job's private /tmp and /dev/shm, in bytes; 0 leaves
	// them as large as memory allows.
	TmpSize int64 `json:"tmp_size,omitempty"`
	// Session names the job's session: without egress, the jobs of one
	// session in one zygote share a network namespace (a loopback only),
	// those of two sessions never do. Required where the zygote keeps one
	// per session (zygote.py: session_netns). It never reaches the zygote:
	// the run request carries an opaque token made of it (netToken).
	Session string `json:"-"`
}

// Bind is one directory of a Confinement.
type Bind struct {
	Path  string
	Write bool
}

// MarshalJSON encodes a Bind as zygote.py reads it: [path, write].
func (b Bind) MarshalJSON() ([]byte, error) { return json.Marshal([]any{b.Path, b.Write}) }

// Rlimit is one resource limit, as setrlimit(2) takes it.
type Rlimit struct {
	// Resource is the limit's number, e.g. unix.RLIMIT_CORE.
	Resource int
	// Cur and Max are the soft and hard limits; RlimInfinity means none.
	Cur, Max uint64
}

// RlimInfinity is the value of an Rlimit without a limit.
const RlimInfinity = ^uint64(0)

// rlimitTriples encodes limits for the zygote: [resource, soft, hard], with
// -1 for no limit as Python's resource module spells RLIM_INFINITY.
func rlimitTriples(rl []Rlimit) [][3]int64 {
	out := make([][3]int64, 0, len(rl))
	for _, r := range rl {
		out = append(out, [3]int64{int64(r.Resource), rlimValue(r.Cur), rlimValue(r.Max)})
	}
	return out
}

func rlimValue(v uint64) int64 {
	if v == RlimInfinity {
		return -1
	}
	return int64(min(v, 1<<63-1))
}

// Outcome is what happened to one run.
type Outcome struct {
	// ExitCode is the process's exit status; -1 when a signal killed it.
	ExitCode int
	// Signal names the signal that killed the process as
	// syscall.Signal.String() spells it ("killed", "segmentation fault"),
	// or "" when it exited by itself.
	Signal string
	// TimedOut says Spec.Timeout passed and Run killed the process group.
	TimedOut bool
	// Stdout and Stderr hold at most OutputLimit bytes each: the first
	// and the last ones the process wrote.
	Stdout, Stderr []byte
	// StdoutTruncated and StderrTruncated say bytes past OutputLimit were
	// discarded; they were at offset StdoutCut (StderrCut) of Stdout
	// (Stderr), between the first bytes and the last.
	StdoutTruncated, StderrTruncated bool
	StdoutCut, StderrCut             int
	// StdoutSpilled and StderrSpilled count the bytes Spec.Spill's writers
	// took: the stream's whole length unless a write to one failed.
	StdoutSpilled, StderrSpilled int64
	// StdoutBytes and StderrBytes count everything the process wrote, kept
	// or not.
	StdoutBytes, StderrBytes int64
	// Duration is the wall-clock time from start to the main process's exit.
	Duration time.Duration
}

// Run starts s.Python with argv [s.Python, s.Script] (no shell anywhere),
// waits for it, and returns its outcome. A script that fails, crashes or
// times out is an outcome, not an error: err is non-nil only when the process
// could not be started (bad Spec, missing interpreter or directory, ctx
// already done). Cancelling ctx kills the process group like a timeout, but
// Run then returns ctx's error alongside the partial outcome, with TimedOut
// false.
func Run(ctx context.Context, s Spec) (Outcome, error) {
	if err := supported(); err != nil {
		return Outcome{}, err
	}
	if err := s.validate(); err != nil {
		return Outcome{}, err
	}
	if s.Confine != nil {
		return Outcome{}, errors.New("runner: a confined job runs only in a sandbox (RunSandboxed)")
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, fmt.Errorf("runner: not started: %w", err)
	}

	limit := s.OutputLimit
	if limit <= 0 {
		limit = DefaultOutputLimit
	}
	stdout, stderr := s.keepers(limit)
	env := s.Env
	if env == nil {
		env = []string{} // nil would make os/exec inherit the worker's environment
	}
	cmd := &exec.Cmd{
		Path: s.Python,
		Args: []string{s.Python, s.Script},
		Dir:  s.Dir,
		Env:  env,
		// Stdin stays nil: os/exec connects it to /dev/null.
		// Stdout and Stderr are not *os.File, so os/exec makes a pipe for
		// each and copies it into the buffer in a goroutine of its own.
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: sysProcAttr(),
		// The backstop: once the main process is reaped, Wait gives up on
		// pipes still held open (by a process that escaped the group)
		// after this delay, instead of hanging.
		WaitDelay: pipeDrainDelay,
	}

	start := time.Now()
	if err := cmd.Start(); err != nil {
		return Outcome{}, fmt.Errorf("runner: start %s: %w", s.Python, err)
	}
	pid := cmd.Process.Pid
	if err := setRlimits(pid, s.Rlimits); err != nil {
		killGroup(pid)
		_ = cmd.Wait()
		return Outcome{}, fmt.Errorf("runner: limits: %w", err)
	}

	// exited closes when the main process has exited but is not yet reaped.
	// Until cmd.Wait reaps it, its pid, which is also the group id, cannot
	// be reused, so signalling the group cannot hit an unrelated process.
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(pid)
	}()

	var timeout <-chan time.Time
	if s.Timeout > 0 {
		t := time.NewTimer(s.Timeout)
		defer t.Stop()
		timeout = t.C
	}

	var out Outcome
	var ctxErr error
	select {
	case <-exited:
	case <-timeout:
		select {
		case <-exited: // it finished just in time
		default:
			out.TimedOut = true
			killGroup(pid)
			<-exited
		}
	case <-ctx.Done():
		ctxErr = ctx.Err()
		killGroup(pid)
		<-exited
	}
	out.Duration = time.Since(start)

	// Whatever the main process left behind in its group dies with it, so
	// nothing outlives the job and the pipes reach EOF.
	killGroup(pid)
	waitErr := cmd.Wait()
	if cmd.ProcessState == nil {
		// The process could not be waited for at all; there is no outcome.
		return out, fmt.Errorf("runner: wait for %s: %w", s.Python, waitErr)
	}
	// A *exec.ExitError is the script's failure, told by ProcessState below,
	// and exec.ErrWaitDelay only says an escaped process held a pipe open.
	out.ExitCode, out.Signal = exitStatus(cmd.ProcessState)

	out.fillOutput(stdout, stderr)
	return out, ctxErr
}

func (s Spec) validate() error {
	switch {
	case s.Python == "":
		return errors.New("runner: Spec.Python is empty")
	case !filepath.IsAbs(s.Python):
		return fmt.Errorf("runner: Spec.Python must be an absolute path, got %q", s.Python)
	case s.Script == "":
		return errors.New("runner: Spec.Script is empty")
	case !filepath.IsAbs(s.Script):
		return fmt.Errorf("runner: Spec.Script must be an absolute path, got %q", s.Script)
	case s.Dir == "":
		return errors.New("runner: Spec.Dir is empty")
	}
	for _, r := range s.Rlimits {
		if r.Cur > r.Max {
			return fmt.Errorf("runner: limit %d: soft limit %d above hard limit %d", r.Resource, r.Cur, r.Max)
		}
	}
	if c := s.Confine; c != nil && (c.UID <= 0 || c.GID <= 0) {
		return fmt.Errorf("runner: a confined job needs a uid and gid above 0, got %d:%d", c.UID, c.GID)
	}
	return nil
}
