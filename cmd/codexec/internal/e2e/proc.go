package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Lines that codexec and its servers log when they are ready.
var (
	// URLRe matches the MCP endpoint that `codexec dev --http` and
	// `codexec frontend` log; its group is the URL.
	URLRe = regexp.MustCompile(`url=(http://\S+/mcp)`)
	// WorkerReadyRe matches a worker's ready line.
	WorkerReadyRe = regexp.MustCompile(`worker ready`)
	// ZygotePIDRe matches the line of a ready zygote; its group is the
	// zygote's pid.
	ZygotePIDRe = regexp.MustCompile(`msg="zygote ready".* pid=(\d+)`)
	// NATSReadyRe matches nats-server's ready line.
	NATSReadyRe = regexp.MustCompile(`Server is ready`)
	// RedisReadyRe matches redis-server's ready line.
	RedisReadyRe = regexp.MustCompile(`[Rr]eady to accept connections`)
)

// CleanEnv is this process's environment without codexec's own settings,
// so that the processes started with it run on their defaults, then extra.
func CleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "CODEXEC_") || name == "CODE_STORAGE_DIR" || name == "ENV_TYPE" {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// FreePort returns a TCP port of the loopback that was free a moment ago.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Command is a process to start: codexec or one of the servers it needs.
type Command struct {
	// Name names the process in errors; the base of Path when empty.
	Name string
	Path string
	Args []string
	// Env is the process's whole environment (nil: none at all).
	Env []string
	// OutputLimit bounds the output kept (see Buffer.Limit); 0 keeps all.
	OutputLimit int
}

func (c Command) name() string {
	if c.Name != "" {
		return c.Name
	}
	return filepath.Base(c.Path)
}

// Proc is a started process, in a process group of its own so that Stop
// also ends what it started (a zygote, the jobs).
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	// Out is the process's output: stdout and stderr, or stderr alone for
	// a stdio MCP server (its stdout is the protocol).
	Out *Buffer

	done    chan struct{} // closed once the process has been waited for
	closeFn func()        // for a stdio server: closes the client, which waits for it
	once    sync.Once
}

// Start starts c.
func (c Command) Start() (*Proc, error) {
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Env = c.Env
	p := &Proc{Name: c.name(), Cmd: cmd, Out: &Buffer{Limit: c.OutputLimit}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name, err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Starter starts a process and owns it: it stops the process when its
// owner is done with it (a test at cleanup, the benchmark at its end).
// Command.Start is the simplest one, which leaves stopping to the caller.
type Starter func(Command) (*Proc, error)

// Pid is the process's id (and its process group's).
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process's group.
func (p *Proc) Signal(sig syscall.Signal) { _ = syscall.Kill(-p.Pid(), sig) }

// Exited is closed when the process has exited; never for a stdio server
// before Stop, as its client waits for it.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// WaitFor waits until re matches the process's output and returns the
// match's first group (or the whole match). It fails when ctx ends or the
// process exits first.
func (p *Proc) WaitFor(ctx context.Context, re *regexp.Regexp) (string, error) {
	m, err := WaitForOutput(ctx, p.Out, re, p.done)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.Name, err)
	}
	return m, nil
}

// ZygotePID waits until the process logs that its zygote is ready, and
// returns the zygote's pid.
func (p *Proc) ZygotePID(ctx context.Context) (int, error) {
	m, err := p.WaitFor(ctx, ZygotePIDRe)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(m)
}

// WaitForOutput waits until re matches out and returns the match's first
// group (or the whole match). It fails when ctx ends or exited (nil: never)
// is closed first.
func WaitForOutput(ctx context.Context, out *Buffer, re *regexp.Regexp, exited <-chan struct{}) (string, error) {
	for {
		changed := out.Changed()
		if m := re.FindStringSubmatch(out.String()); m != nil {
			if len(m) > 1 {
				return m[1], nil
			}
			return m[0], nil
		}
		select {
		case <-changed:
		case <-exited:
			if m := re.FindStringSubmatch(out.String()); m != nil {
				continue
			}
			return "", fmt.Errorf("exited before %q appeared in its output:\n%s", re, out.String())
		case <-ctx.Done():
			return "", fmt.Errorf("no %q in its output: %w\n%s", re, ctx.Err(), out.String())
		}
	}
}

// Stop ends the process: it closes a stdio server's client, sends SIGTERM
// to the process group and, after grace, SIGKILL. It waits for the
// process and may be called more than once.
func (p *Proc) Stop(grace time.Duration) {
	p.once.Do(func() {
		if p.closeFn != nil {
			p.closeFn()
		}
		if p.Cmd == nil || p.Cmd.Process == nil {
			return
		}
		p.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			p.Signal(syscall.SIGKILL)
			<-p.done
		}
	})
}

// Kill sends SIGKILL to the process alone, not its group, as `kill -9
// <pid>` does: what it started is left to die (or not) as it would in a
// crash.
func (p *Proc) Kill() { _ = p.Cmd.Process.Signal(syscall.SIGKILL) }
