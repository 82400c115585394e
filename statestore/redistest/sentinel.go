package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Sentinel timing of StartSentinels: a primary that has not answered for
// SentinelDownAfter is taken as down, and a failover that has not finished
// within twice failoverTimeout is retried.
const (
	SentinelDownAfter = time.Second
	failoverTimeout   = 5 * time.Second
)

// StartReplica starts a redis-server that replicates primary (same
// persistence settings as Start), waits until its first sync is done, and
// stops it when t ends.
func StartReplica(t testing.TB, primary *Server) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatalf("redistest: primary address %q: %v", primary.Addr, err)
	}
	s := &Server{Dir: t.TempDir(), bin: binary(t), args: []string{"--replicaof", host, port}}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("redistest: log of replica redis-server at %s:\n%s", s.Addr, s.logTail())
		}
	})
	s.start(t, 0)
	if err := waitInfo(s.Addr, "replication", readyTimeout, "\nmaster_link_status:up\r"); err != nil {
		t.Fatalf("redistest: replica %s of %s: %v\n%s", s.Addr, primary.Addr, err, s.logTail())
	}
	return s
}

// Sentinel is a redis-server in sentinel mode, a child process of the test.
type Sentinel struct {
	Addr string
	Dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartSentinels starts n sentinels (n odd, 3 is usual) that monitor
// primary under the name master with a quorum of n/2+1, and waits until
// each of them knows the other sentinels and replicas (the replicas already
// running when it is called), so that a failover can start as soon as the
// primary goes. They are stopped when t ends.
func StartSentinels(t testing.TB, primary *Server, master string, n, replicas int) []*Sentinel {
	t.Helper()
	bin := binary(t)
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatalf("redistest: primary address %q: %v", primary.Addr, err)
	}
	out := make([]*Sentinel, n)
	for i := range out {
		s := &Sentinel{Dir: t.TempDir()}
		t.Cleanup(func() {
			s.Stop()
			if t.Failed() {
				t.Logf("redistest: log of sentinel at %s:\n%s", s.Addr, tail(filepath.Join(s.Dir, logName)))
			}
		})
		if err := s.launch(t, bin, master, host, port, n/2+1); err != nil {
			t.Fatalf("redistest: sentinel: %v\n%s", err, tail(filepath.Join(s.Dir, logName)))
		}
		out[i] = s
	}
	want := fmt.Sprintf("slaves=%d,sentinels=%d\r", replicas, n)
	for _, s := range out {
		if err := waitInfo(s.Addr, "sentinel", 30*time.Second, want); err != nil {
			t.Fatalf("redistest: sentinel %s: %v", s.Addr, err)
		}
	}
	return out
}

// SentinelAddrs returns the addresses of ss, for a client's configuration.
func SentinelAddrs(ss []*Sentinel) []string {
	addrs := make([]string, len(ss))
	for i, s := range ss {
		addrs[i] = s.Addr
	}
	return addrs
}

// launch writes the sentinel's configuration (sentinels rewrite it, so it
// lives in the sentinel's own directory) and starts it on a free port.
func (s *Sentinel) launch(t testing.TB, bin, master, host, port string, quorum int) error {
	var err error
	for range portAttempts {
		p := freePort(t)
		conf := filepath.Join(s.Dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\n"+
			"sentinel monitor %s %s %s %d\n"+
			"sentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s %d\n"+
			"sentinel parallel-syncs %s 1\n",
			p, s.Dir, master, host, port, quorum,
			master, SentinelDownAfter.Milliseconds(), master, failoverTimeout.Milliseconds(), master)
		if err = os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		if err = s.run(bin, conf, p); err == nil {
			return nil
		}
	}
	return err
}

func (s *Sentinel) run(bin, conf string, port int) error {
	log, err := os.OpenFile(filepath.Join(s.Dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s --sentinel: %w", bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if err := waitSentinel(addr, cmd.Process.Pid, done); err != nil {
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("sentinel on %s: %w", addr, err)
	}
	s.mu.Lock()
	s.cmd, s.done, s.Addr = cmd, done, addr
	s.mu.Unlock()
	return nil
}

// waitSentinel polls addr until the sentinel with pid answers, it exits,
// or readyTimeout passes (a sentinel has no data to load: waitReady's
// check of INFO persistence does not apply).
func waitSentinel(addr string, pid int, done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-done:
			return errors.New("exited before it was ready")
		default:
		}
		info, err := infoSection(addr, "server")
		if err == nil && strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("another server answers on %s", addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop ends the sentinel and waits for it. It is idempotent.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// PrimaryAddr asks the sentinel where the primary named master is now.
func (s *Sentinel) PrimaryAddr(master string) (string, error) {
	info, err := infoSection(s.Addr, "sentinel")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if !strings.Contains(line, ":name="+master+",") {
			continue
		}
		for _, field := range strings.Split(line, ",") {
			if a, ok := strings.CutPrefix(field, "address="); ok {
				return a, nil
			}
		}
	}
	return "", fmt.Errorf("sentinel %s does not monitor %q", s.Addr, master)
}

// waitInfo polls INFO section of addr until it contains every one of want.
func waitInfo(addr, section string, within time.Duration, want ...string) error {
	deadline := time.Now().Add(within)
	for {
		info, err := infoSection(addr, section)
		if err == nil {
			missing := ""
			for _, w := range want {
				if !strings.Contains(info, w) {
					missing = w
					break
				}
			}
			if missing == "" {
				return nil
			}
			err = fmt.Errorf("no %q in INFO %s:\n%s", strings.TrimSpace(missing), section, info)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func infoSection(addr, section string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	info, err := command(conn, bufio.NewReader(conn), "INFO", section)
	if err != nil {
		return "", errors.Join(fmt.Errorf("INFO %s", section), err)
	}
	return info, nil
}

// tail returns the end of the file at path, for failure messages.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
