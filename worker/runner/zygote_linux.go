package runner

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/codexec/codexec/worker/sandbox"
	"golang.org/x/sys/unix"
)

// Zygote is a running zygote: a long-lived Python process that has imported
// its preloads and forks one child per job. It is safe for concurrent use;
// jobs run in parallel, each child in a session of its own.
type Zygote struct {
	cfg     ZygoteConfig
	info    ZygoteInfo
	log     *slog.Logger
	cmd     *exec.Cmd
	conn    *net.UnixConn
	devnull *os.File // every job's stdin
	nullFD  int      // devnull's descriptor
	logOut  *lineLogger
	// sandboxed says the zygote runs in a sandbox: its jobs carry a
	// Confinement and the pids it reports are its namespace's.
	sandboxed bool
	// clones says its jobs' binds travel as mount clones
	// (zygoteSandboxCfg.Clones).
	clones bool
	// netKey keys netToken: the zygote's name for a session's network
	// namespace. It never leaves this process.
	netKey [32]byte

	mu     sync.Mutex
	nextID uint64
	jobs   map[uint64]chan zygoteMsg
	err    error // why the zygote is gone, once it is
	ran    uint64

	gone      chan struct{} // closed when the control connection failed
	done      chan struct{} // closed when the process has been reaped
	closeOnce sync.Once
}

// StartZygote starts a zygote and waits until it has imported its preloads
// and is ready to fork, at most cfg.StartTimeout or until ctx ends. When the
// imports started threads it stops the zygote and returns an error wrapping
// ErrZygoteUnsafe.
func StartZygote(ctx context.Context, cfg ZygoteConfig) (*Zygote, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	if !filepath.IsAbs(cfg.Python) {
		return nil, fmt.Errorf("runner: zygote: Python must be an absolute path, got %q", cfg.Python)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultZygoteStartTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	zc := zygoteConfig{Preload: nonNil(cfg.Preload)}
	var mounts []sandbox.Mount
	if sb := cfg.Sandbox; sb != nil {
		zc.Sandbox = &zygoteSandboxCfg{
			NetNS: !sb.Box.Network(), Hidden: nonNil(sb.Hidden), Rootless: sb.Box.Rootless(), Seccomp: sb.Seccomp,
			InterpreterInit: sb.interpreterInit,
			Clones:          !sb.noClones && !sb.Box.Rootless() && mountClonesWork(),
		}
		if cfg.OneShot {
			zc.Sandbox.Spares = 1
		}
		im, err := sandbox.InterpreterMounts(cfg.Python)
		if err != nil {
			return nil, fmt.Errorf("runner: zygote: %w", err)
		}
		mounts = append(im, sb.Mounts...)
		for _, m := range mounts {
			if strings.HasPrefix(m.Path, "/tmp/") && !slices.Contains(sb.Hidden, m.Path) {
				zc.Sandbox.Keep = append(zc.Sandbox.Keep, Bind{Path: m.Path, Write: m.Write})
			}
		}
	}
	preload, err := json.Marshal(zc)
	if err != nil {
		return nil, fmt.Errorf("runner: zygote: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("runner: zygote: socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "zygote-control")
	theirs := os.NewFile(uintptr(fds[1]), "zygote-control")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, fmt.Errorf("runner: zygote: %w", err)
	}
	conn := fc.(*net.UnixConn)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("runner: zygote: %w", err)
	}

	log := cfg.Logger.With("python", cfg.Python)
	z := &Zygote{
		cfg: cfg, log: log, conn: conn, devnull: devnull, nullFD: int(devnull.Fd()),
		logOut: &lineLogger{log: log},
		jobs:   make(map[uint64]chan zygoteMsg),
		gone:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	if _, err := rand.Read(z.netKey[:]); err != nil {
		conn.Close()
		devnull.Close()
		return nil, fmt.Errorf("runner: zygote: %w", err)
	}
	env := cfg.Env
	if env == nil {
		env = []string{}
	}
	// -S: no site start-up in the zygote, whose privileges must run none
	// of an untrusted environment's code (zygote.py: _site_without_code).
	argv := []string{cfg.Python, "-S", "-c", zygoteBootstrap, string(preload)}
	if cfg.TrustSite {
		argv = slices.Delete(argv, 1, 2)
	}
	extra := []*os.File{theirs}
	var infoR *os.File
	if sb := cfg.Sandbox; sb != nil {
		// The launcher tells the zygote's pid on the host on fd 4.
		var infoW *os.File
		if infoR, infoW, err = os.Pipe(); err != nil {
			conn.Close()
			devnull.Close()
			return nil, fmt.Errorf("runner: zygote: %w", err)
		}
		defer infoW.Close()
		defer infoR.Close()
		extra = append(extra, infoW)
		argv = sb.Box.Args(sandbox.Options{
			Mounts: mounts, Network: sb.Box.Network(), Caps: zygoteCaps, AsPID1: true, InfoFD: 4, HostCgroupNS: sb.HostCgroupNS,
		}, argv...)
		z.sandboxed = true
		z.clones = zc.Sandbox.Clones
	}
	z.cmd = &exec.Cmd{
		Path: argv[0],
		Args: argv,
		Env:  env,
		Dir:  "/",
		// stdin is /dev/null; stdout and stderr share one pipe that is
		// logged. A pipe, not /dev/null: the sys.stdout and sys.stderr a
		// child inherits were set up for a pipe, like a job's.
		Stdout:      z.logOut,
		Stderr:      z.logOut,
		ExtraFiles:  extra,
		SysProcAttr: sysProcAttr(),
		WaitDelay:   pipeDrainDelay,
	}
	began := time.Now()
	if err := z.cmd.Start(); err != nil {
		conn.Close()
		devnull.Close()
		return nil, fmt.Errorf("runner: zygote: start %s: %w", cfg.Python, err)
	}
	theirs.Close()
	hostPID := z.cmd.Process.Pid
	if infoR != nil {
		extra[1].Close()
		if pid, err := readChildPID(infoR); err == nil {
			hostPID = pid
		} else {
			log.Warn("sandbox: no child pid from the launcher", "err", err)
		}
	}
	go func() {
		err := z.cmd.Wait()
		z.logOut.flush()
		z.fail(fmt.Errorf("runner: zygote %d exited: %v", z.cmd.Process.Pid, err))
		close(z.done)
	}()

	ready, err := z.handshake(ctx)
	if err != nil {
		z.Close()
		return nil, err
	}
	z.info = ZygoteInfo{
		PID: hostPID, Version: ready.Python, Preloaded: ready.Preloaded, Failed: ready.Failed,
		ImportTime: time.Duration(ready.ImportMS * float64(time.Millisecond)), StartTime: time.Since(began),
		Keeper: ready.Keeper,
	}
	go z.readLoop()
	return z, nil
}

// handshake sends the zygote its code and waits for its ready message.
func (z *Zygote) handshake(ctx context.Context) (zygoteMsg, error) {
	var m zygoteMsg
	if _, err := z.conn.Write(zygoteCode); err != nil {
		return m, fmt.Errorf("runner: zygote: send code: %w", err)
	}
	deadline := time.Now().Add(z.cfg.StartTimeout)
	if err := z.conn.SetReadDeadline(deadline); err != nil {
		return m, fmt.Errorf("runner: zygote: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = z.conn.SetReadDeadline(time.Now()) })
	defer stop()
	buf := make([]byte, 64<<10)
	n, err := z.conn.Read(buf)
	switch {
	case ctx.Err() != nil:
		return m, fmt.Errorf("runner: zygote: start: %w", ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return m, fmt.Errorf("runner: zygote: not ready after %s", z.cfg.StartTimeout)
	case err != nil || n == 0:
		// It exited before saying anything: its output says why.
		<-z.done
		return m, fmt.Errorf("runner: zygote: exited during start-up: %s", z.logOut.tail())
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil || m.Op != opReady {
		return m, fmt.Errorf("runner: zygote: unexpected first message %q", buf[:n])
	}
	if len(m.Threads) > 0 {
		return m, fmt.Errorf("%w: %s", ErrZygoteUnsafe, strings.Join(m.Threads, ", "))
	}
	if err := z.conn.SetReadDeadline(time.Time{}); err != nil {
		return m, fmt.Errorf("runner: zygote: %w", err)
	}
	return m, nil
}

// readLoop hands each message from the zygote to the job it is about.
func (z *Zygote) readLoop() {
	buf := make([]byte, 64<<10)
	for {
		n, err := z.conn.Read(buf)
		if err != nil || n == 0 {
			if err == nil {
				err = io.EOF
			}
			z.fail(fmt.Errorf("runner: zygote %d: control connection: %w", z.info.PID, err))
			return
		}
		var m zygoteMsg
		if err := json.Unmarshal(buf[:n], &m); err != nil {
			z.log.Error("zygote sent an undecodable message", "msg", string(buf[:n]))
			continue
		}
		z.mu.Lock()
		ch := z.jobs[m.ID]
		if m.Op == opExited || m.Op == opFailed {
			delete(z.jobs, m.ID)
		}
		z.mu.Unlock()
		if ch != nil {
			ch <- m // buffered for every message a job gets
		}
	}
}

// fail records why the zygote is gone and wakes every job waiting on it.
func (z *Zygote) fail(err error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.err == nil {
		z.err = err
		close(z.gone)
	}
}

// Info describes the zygote.
func (z *Zygote) Info() ZygoteInfo { return z.info }

// Done is closed once the zygote process has exited and been reaped.
func (z *Zygote) Done() <-chan struct{} { return z.done }

// Err says why the zygote is gone, or nil while it serves.
func (z *Zygote) Err() error {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.err
}

// RSS returns the zygote's resident set size in bytes, 0 when unknown.
func (z *Zygote) RSS() int64 { return ProcessRSS(z.info.PID) }

// Close stops the zygote: SIGKILL, which kills the children still running
// too (they die with their parent). It waits until the process is reaped.
// Close is idempotent.
func (z *Zygote) Close() error {
	z.closeOnce.Do(func() {
		z.fail(errors.New("runner: zygote closed"))
		if z.cmd.Process != nil {
			_ = z.cmd.Process.Kill()
		}
		<-z.done
		z.conn.Close()
		z.devnull.Close()
	})
	return nil
}

// Run runs s in a child forked from the zygote and returns its outcome,
// with the same guarantees as the package-level Run: stdin /dev/null,
// stdout and stderr read concurrently into capped buffers, a process group
// (here a session) of its own that is SIGKILLed on timeout, on cancellation
// and when the child exits. s.Python is ignored: the zygote's interpreter
// runs the job.
//
// An error wrapping ErrNotStarted means nothing ran; one wrapping
// ErrZygoteDied means the job was killed with the zygote, and the outcome
// holds what it wrote until then.
func (z *Zygote) Run(ctx context.Context, s Spec) (Outcome, error) {
	if err := s.validate(); err != nil {
		return Outcome{}, err
	}
	if z.sandboxed != (s.Confine != nil) {
		// A job never runs unconfined in a sandbox (as its root) nor
		// unconfined when it should have been confined.
		return Outcome{}, fmt.Errorf("%w: the job's confinement does not match the zygote's sandbox", ErrNotStarted)
	}
	if err := ctx.Err(); err != nil {
		return Outcome{}, fmt.Errorf("runner: not started: %w", err)
	}
	if fi, err := os.Stat(s.Dir); err != nil || !fi.IsDir() {
		if err == nil {
			err = syscall.ENOTDIR
		}
		return Outcome{}, fmt.Errorf("runner: working directory: %w", err)
	}
	for _, kv := range s.Env {
		if !utf8.ValidString(kv) {
			// JSON would mangle it; a spawned interpreter gets it byte for byte.
			return Outcome{}, fmt.Errorf("%w: the environment is not valid UTF-8", ErrNotStarted)
		}
	}
	limit := s.OutputLimit
	if limit <= 0 {
		limit = DefaultOutputLimit
	}

	z.mu.Lock()
	if z.err != nil {
		err := z.err
		z.mu.Unlock()
		return Outcome{}, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	z.nextID++
	id := z.nextID
	ch := make(chan zygoteMsg, 4) // at most two started, then exited or failed
	z.jobs[id] = ch
	z.mu.Unlock()
	forget := func() {
		z.mu.Lock()
		delete(z.jobs, id)
		z.mu.Unlock()
	}

	req, clones, err := z.runRequest(id, s, false)
	if err == nil && len(req) > maxZygoteRequest {
		closeFDs(clones)
		err = fmt.Errorf("%w: the request is %d bytes, more than %d", ErrNotStarted, len(req), maxZygoteRequest)
	}
	if err != nil {
		forget()
		return Outcome{}, err
	}

	stdout, stderr := s.keepers(limit)
	outR, outW, err := outputPipe()
	if err != nil {
		forget()
		return Outcome{}, err
	}
	errR, errW, err := outputPipe()
	if err != nil {
		forget()
		outR.Close()
		unix.Close(outW)
		closeFDs(clones)
		return Outcome{}, err
	}
	start := time.Now()
	_, _, err = z.conn.WriteMsgUnix(req, unix.UnixRights(append([]int{z.nullFD, outW, errW}, clones...)...), nil)
	// The zygote holds its own copies now (or never will).
	unix.Close(outW)
	unix.Close(errW)
	closeFDs(clones)
	var copying sync.WaitGroup
	copying.Add(2)
	go func() { defer copying.Done(); copyOutput(stdout, outR) }()
	go func() { defer copying.Done(); copyOutput(stderr, errR) }()
	closePipes := func() {
		_ = outR.SetReadDeadline(time.Now())
		_ = errR.SetReadDeadline(time.Now())
		copying.Wait()
		outR.Close()
		errR.Close()
	}
	if err != nil {
		forget()
		closePipes()
		return Outcome{}, fmt.Errorf("%w: send to zygote: %w", ErrNotStarted, err)
	}
	// drainThenClose waits for the pipes to reach EOF, at most
	// pipeDrainDelay (a process that escaped the group may hold them).
	drainThenClose := func() {
		drained := make(chan struct{})
		go func() { copying.Wait(); close(drained) }()
		t := time.NewTimer(pipeDrainDelay)
		select {
		case <-drained:
		case <-t.C:
		}
		t.Stop()
		closePipes()
	}

	var timeout <-chan time.Time
	if s.Timeout > 0 {
		t := time.NewTimer(s.Timeout - time.Since(start))
		defer t.Stop()
		timeout = t.C
	}
	var (
		out        Outcome
		ctxErr     error
		pid        int
		status     int
		exited     bool
		grace      <-chan time.Time
		graceTimer *time.Timer
		ctxDone    = ctx.Done()
	)
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	kill := func() {
		_ = z.send(zygoteKill{Op: opKill, ID: id})
		if graceTimer == nil {
			graceTimer = time.NewTimer(zygoteKillGrace)
			grace = graceTimer.C
		}
	}
	// handle takes one message about the job; it reports whether the job
	// failed to start.
	failed := ""
	handle := func(m zygoteMsg) {
		switch m.Op {
		case opStarted:
			pid = m.PID
		case opFailed:
			failed = m.Error
		case opExited:
			status, exited = m.Status, true
		}
	}
	for !exited {
		select {
		case m := <-ch:
			if handle(m); failed != "" {
				closePipes()
				return Outcome{}, fmt.Errorf("%w: %s", ErrNotStarted, failed)
			}
		case <-timeout:
			timeout = nil
			out.TimedOut = true
			kill()
		case <-ctxDone:
			ctxDone = nil
			ctxErr = ctx.Err()
			kill()
		case <-grace:
			// The zygote does not answer: end it, and the job with it.
			z.log.Error("zygote did not report a killed job; stopping it", "pid", z.info.PID)
			z.fail(errors.New("runner: zygote did not answer a kill"))
			_ = z.cmd.Process.Kill()
			grace = nil
		case <-z.gone:
			// The reader hands over every message it read before it
			// noticed the end: take those first.
			for pending := true; pending; {
				select {
				case m := <-ch:
					handle(m)
				default:
					pending = false
				}
			}
			if exited {
				continue
			}
			forget()
			if failed != "" || pid == 0 {
				closePipes()
				return Outcome{}, fmt.Errorf("%w: %w", ErrNotStarted, z.Err())
			}
			// The child dies with the zygote (its parent-death signal);
			// what it started does not, unless we kill the group. In a
			// sandbox the pid is the namespace's, and the namespace died
			// with the zygote, its PID 1, taking every process with it.
			if !z.sandboxed {
				killGroup(pid)
			}
			out.Duration = time.Since(start)
			out.ExitCode, out.Signal = -1, "killed"
			z.fillOutput(&out, stdout, stderr, drainThenClose)
			return out, fmt.Errorf("%w: %w", ErrZygoteDied, z.Err())
		}
	}
	out.Duration = time.Since(start)
	z.mu.Lock()
	z.ran++
	z.mu.Unlock()
	// The zygote killed the job's group before it reaped the child, so the
	// pipes reach EOF unless a process escaped the group (setsid).
	z.fillOutput(&out, stdout, stderr, drainThenClose)
	ws := syscall.WaitStatus(status)
	if ws.Signaled() {
		out.ExitCode, out.Signal = -1, ws.Signal().String()
	} else {
		out.ExitCode = ws.ExitStatus()
	}
	return out, ctxErr
}

func (z *Zygote) fillOutput(out *Outcome, stdout, stderr *headTail, drain func()) {
	drain()
	out.fillOutput(stdout, stderr)
}

// Jobs returns how many jobs the zygote has run to completion.
func (z *Zygote) Jobs() uint64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.ran
}

func (z *Zygote) send(r zygoteKill) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = z.conn.Write(data)
	return err
}

// outputPipe makes a pipe for a job's stdout or stderr: the read end is a
// pollable *os.File of ours, the write end a blocking descriptor for the
// child (a non-blocking stdout would fail a job's large writes with EAGAIN).
func outputPipe() (*os.File, int, error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, -1, fmt.Errorf("runner: pipe: %w", err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, -1, fmt.Errorf("runner: pipe: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), p[1], nil
}

// ProcessRSS returns the resident set size of process pid in bytes (VmRSS
// in /proc/<pid>/status), 0 when it cannot be read.
func ProcessRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// lineLogger logs what a zygote writes, line by line, and keeps the last
// few lines to explain a failed start.
type lineLogger struct {
	log  *slog.Logger
	mu   sync.Mutex
	part []byte
	last []string
}

func (l *lineLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.emit(string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	if len(l.part) > 64<<10 { // a runaway line
		l.emit(string(l.part))
		l.part = nil
	}
	return len(p), nil
}

func (l *lineLogger) emit(line string) {
	l.log.Warn("zygote output", "line", line)
	l.last = append(l.last, line)
	if len(l.last) > 20 {
		l.last = l.last[1:]
	}
}

func (l *lineLogger) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.part) > 0 {
		l.emit(string(l.part))
		l.part = nil
	}
}

func (l *lineLogger) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.last) == 0 {
		return "(no output)"
	}
	return strings.Join(l.last, "\n")
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// readChildPID reads bubblewrap's --info-fd report: {"child-pid": N}.
func readChildPID(r *os.File) (int, error) {
	_ = r.SetReadDeadline(time.Now().Add(30 * time.Second))
	var info struct {
		ChildPID int `json:"child-pid"`
	}
	if err := json.NewDecoder(r).Decode(&info); err != nil {
		return 0, err
	}
	if info.ChildPID <= 0 {
		return 0, errors.New("no child-pid")
	}
	return info.ChildPID, nil
}

// runRequest encodes a run request for job id (zygoteRunHeader, a newline,
// zygoteJob; encoding/json escapes every newline within a value).
func (z *Zygote) runRequest(id uint64, s Spec, context bool) (req []byte, clones []int, err error) {
	h := zygoteRunHeader{Op: opRun, ID: id, Context: context}
	if c := s.Confine; c != nil {
		h.Unmount = c.Unmount
		if c.Session != "" {
			h.Net = z.netToken(c.Session)
		}
	}
	job, err := json.Marshal(zygoteJob{Script: s.Script, Dir: s.Dir, Env: nonNil(s.Env), Rlimits: rlimitTriples(s.Rlimits), Confine: s.Confine})
	if err != nil {
		return nil, nil, err
	}
	if z.clones && s.Confine != nil {
		if clones, err = mountClones(s.Confine.Binds, z.cfg.Sandbox.Hidden); err != nil {
			return nil, nil, err
		}
		h.Clones = len(clones)
	}
	head, err := json.Marshal(h)
	if err != nil {
		closeFDs(clones)
		return nil, nil, err
	}
	return slices.Concat(head, []byte{'\n'}, job), clones, nil
}

// mountClones returns, for each bind, a mount clone of its directory:
// a copy of the mount it lies in, rooted at it and detached from every
// mount namespace (open_tree(2), OPEN_TREE_CLONE, not recursive, as a
// bind is not), private, with nosuid and nodev set, and read-only unless the bind
// writes. The job's process attaches each in its own mount namespace
// (zygote.py: _attach_clones). The caller closes them once sent.
func mountClones(binds []Bind, hidden []string) ([]int, error) {
	fds := make([]int, 0, len(binds))
	for _, b := range binds {
		fd, err := mountClone(b, hidden)
		if err != nil {
			closeFDs(fds)
			return nil, fmt.Errorf("runner: %s: %w", b.Path, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

func mountClone(b Bind, hidden []string) (int, error) {
	if filepath.Clean(b.Path) != b.Path || !slices.ContainsFunc(hidden, func(root string) bool {
		return strings.HasPrefix(b.Path, root+"/")
	}) {
		return -1, errors.New("not under a hidden root")
	}
	// A link in the bind's place is not followed (a job may have made one
	// where its directory was), and a bind is a directory.
	fd, err := unix.OpenTree(unix.AT_FDCWD, b.Path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, fmt.Errorf("mount clone: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		unix.Close(fd)
		if err == nil {
			err = unix.ENOTDIR
		}
		return -1, fmt.Errorf("mount clone: %w", err)
	}
	// Private: a clone of a shared mount (the sessions' root is one) is
	// made its peer, and what is mounted under one would reach the other.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Propagation: unix.MS_PRIVATE}
	if !b.Write {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("mount clone: %w", err)
	}
	return fd, nil
}

// mountClonesWork says whether this process can make mount clones
// (open_tree(2) and mount_setattr(2): Linux 5.12, and CAP_SYS_ADMIN), on a
// machine whose number for move_mount(2) zygote.py knows.
var mountClonesWork = sync.OnceValue(func() bool {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return false
	}
	fd, err := unix.OpenTree(unix.AT_FDCWD, "/", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	return unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID}) == nil
})

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// netToken is the zygote's key for session's network namespace: an HMAC
// of the session under a key of this process's, so that the zygote's
// memory, which every job starts with a copy of, names no session.
func (z *Zygote) netToken(session string) string {
	m := hmac.New(sha256.New, z.netKey[:])
	m.Write([]byte(session))
	return hex.EncodeToString(m.Sum(nil)[:16])
}
