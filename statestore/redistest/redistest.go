// Package redistest runs a real redis-server as a child process for tests:
// on a random free port, with its data in a temporary directory, stopped
// when the test ends.
//
// The binary is $CODEXEC_REDIS_SERVER, or redis-server on PATH. When neither
// is there, Start skips the test, or fails it when $CI is "true", so CI
// cannot pass by skipping.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvBinary names the environment variable that overrides the redis-server binary.
const EnvBinary = "CODEXEC_REDIS_SERVER"

const (
	// readyTimeout bounds the wait for a started server to answer.
	readyTimeout = 15 * time.Second
	// stopTimeout bounds the wait for a server to exit after SIGTERM before
	// it is killed.
	stopTimeout = 10 * time.Second
	// portAttempts is how many free ports Start tries before giving up; a port
	// found free can be taken by someone else before redis-server binds it.
	portAttempts = 5
	logName      = "redis.log"
)

// errPortInUse reports that redis-server exited because its port was taken.
var errPortInUse = errors.New("port in use")

// Server is a redis-server child process.
type Server struct {
	// Addr is the server's host:port. Restart may change it (if the old port
	// was taken meanwhile), so read it after Restart, not concurrently.
	Addr string
	// Dir is the server's data directory (--dir), kept across Restart; it
	// also holds the server's log, redis.log.
	Dir string

	bin  string
	port int
	args []string // extra arguments of redis-server (a replica's --replicaof)

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited and been waited for
}

// Start starts a redis-server with append-only persistence and no RDB
// snapshots, waits until it answers PING, and stops it when t ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir(), bin: binary(t)}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("redistest: log of redis-server at %s:\n%s", s.Addr, s.logTail())
		}
	})
	s.start(t, 0)
	return s
}

// URL returns the server's URL for database 0, e.g. "redis://127.0.0.1:6379/0".
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Stop shuts the server down with SIGTERM, so it syncs its append-only file,
// and waits for it to exit (killing it after a timeout). It is idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	// A server refuses SIGTERM while it writes its first append-only file
	// (a replica does after its first sync): ask again until it exits.
	deadline := time.After(stopTimeout)
	for {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(100 * time.Millisecond):
			continue
		case <-deadline:
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		break
	}
	s.cmd, s.done = nil, nil
}

// Kill ends the server with SIGKILL, as a crash would: nothing is synced.
// It waits for the process to exit and is idempotent.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Restart stops the server and starts it again on the same data directory,
// so it comes back with what it had written. It keeps the port when it can.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t, s.port)
}

// binary finds the redis-server binary, or skips or fails t.
func binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(EnvBinary); bin != "" {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("redistest: $%s=%q is not an executable: %v", EnvBinary, bin, err)
		}
		return bin
	}
	bin, err := exec.LookPath("redis-server")
	if err == nil {
		return bin
	}
	msg := fmt.Sprintf("redistest: redis-server not found on PATH (install it, e.g. `apt-get install -y redis-server`, or set $%s)", EnvBinary)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s; CI must run the install step for redis-server before the tests", msg)
	}
	t.Skip(msg)
	return ""
}

// start launches the server on port (a free one if 0 or taken) and waits for
// it to be ready.
func (s *Server) start(t testing.TB, port int) {
	t.Helper()
	var err error
	for range portAttempts {
		if port == 0 {
			port = freePort(t)
		}
		err = s.launch(port)
		if !errors.Is(err, errPortInUse) {
			break
		}
		port = 0
	}
	if err != nil {
		t.Fatalf("redistest: %v\nlog of redis-server:\n%s", err, s.logTail())
	}
}

// launch starts redis-server on port and waits until it answers. On failure
// the process has exited when launch returns.
func (s *Server) launch(port int) error {
	log, err := os.OpenFile(filepath.Join(s.Dir, logName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer log.Close() // the child has its own descriptor
	logStart, err := log.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}

	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", s.Dir,
		"--appendonly", "yes",
		"--save", "",
		"--protected-mode", "no",
		"--daemonize", "no",
		// A replica's first sync starts at once rather than 5s later.
		"--repl-diskless-sync-delay", "0",
	)
	cmd.Args = append(cmd.Args, s.args...)
	// Files, not buffers: exec then copies nothing in goroutines of its own.
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	if err := waitReady(addr, cmd.Process.Pid, done); err != nil {
		_ = cmd.Process.Kill()
		<-done
		if s.logSince(logStart, "Address already in use") {
			return fmt.Errorf("redis-server on %s: %w", addr, errPortInUse)
		}
		return fmt.Errorf("redis-server on %s: %w", addr, err)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.Addr, s.port = addr, port
	s.mu.Unlock()
	return nil
}

// waitReady polls addr until the server with pid answers PING and has
// finished loading its data, the process exits, or readyTimeout passes.
// Checking the pid makes sure the answer comes from our server, not from
// another one that took the port first.
func waitReady(addr string, pid int, done <-chan struct{}) error {
	deadline := time.Now().Add(readyTimeout)
	var last error
	for {
		select {
		case <-done:
			return errors.New("exited before it was ready")
		default:
		}
		if last = probe(addr, pid); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, last)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func probe(addr string, pid int) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(conn)

	pong, err := command(conn, r, "PING")
	if err != nil {
		return fmt.Errorf("PING: %w", err)
	}
	if pong != "PONG" {
		return fmt.Errorf("PING answered %q", pong)
	}
	info, err := command(conn, r, "INFO", "server", "persistence")
	if err != nil {
		return fmt.Errorf("INFO: %w", err)
	}
	if !strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
		return fmt.Errorf("another server answers on %s", addr)
	}
	if !strings.Contains(info, "\nloading:0\r") {
		return errors.New("still loading its data")
	}
	return nil
}

// command sends one command and reads a simple-string, error or bulk-string
// reply: enough RESP to tell whether a server is up.
func command(w io.Writer, r *bufio.Reader, args ...string) (string, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := w.Write(b.Bytes()); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("unexpected reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// freePort asks the kernel for a free port on 127.0.0.1 and releases it.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// logSince reports whether the log written from offset on contains substr.
func (s *Server) logSince(offset int64, substr string) bool {
	b, err := os.ReadFile(filepath.Join(s.Dir, logName))
	if err != nil || offset > int64(len(b)) {
		return false
	}
	return bytes.Contains(b[offset:], []byte(substr))
}

// logTail returns the end of the server's log, for failure messages.
func (s *Server) logTail() string {
	b, err := os.ReadFile(filepath.Join(s.Dir, logName))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}
