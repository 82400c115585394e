package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Interp is a context's interpreter: a job's process forked from a zygote,
// confined as a job is, that runs context.py and keeps its variables from
// one cell to the next. Its fd 0 is a SOCK_SEQPACKET socket to the worker,
// the request channel (cells in, "done" out); its stdout and stderr are
// pipes the worker reads during each call. One cell runs at a time.
type Interp struct {
	z       *Zygote
	id      uint64
	sock    int // our end of the request channel
	out, er int // read ends of its stdout and stderr, non-blocking
	// outEOF and errEOF say a pipe reached its end of file: nothing in the
	// interpreter holds its write end any more.
	outEOF, errEOF bool
	msgs           chan zygoteMsg
	onClose        func()

	mu     sync.Mutex // one call at a time
	seq    int
	closed bool

	endOnce sync.Once
	ended   chan struct{} // closed when the zygote said the process is gone
	status  int           // its wait status, once ended
	why     string        // why it ended, when the worker ended it

	closeOnce sync.Once
}

// interpReadyTimeout bounds the start of a context's interpreter after its
// zygote forked it: reading context.py and its first message.
const interpReadyTimeout = 30 * time.Second

// StartInterp starts a context's interpreter: s runs as a job would (its
// environment, directory, rlimits and confinement), with s.Script the
// context's code, and fd 0 the request channel instead of /dev/null.
// s.Timeout is ignored: each cell has its own.
func (z *Zygote) StartInterp(ctx context.Context, s Spec) (*Interp, error) {
	if err := s.validate(); err != nil {
		return nil, err
	}
	if z.sandboxed != (s.Confine != nil) {
		return nil, fmt.Errorf("%w: the context's confinement does not match the zygote's sandbox", ErrNotStarted)
	}
	for _, kv := range s.Env {
		if !utf8.ValidString(kv) {
			return nil, fmt.Errorf("%w: the environment is not valid UTF-8", ErrNotStarted)
		}
	}
	z.mu.Lock()
	if z.err != nil {
		err := z.err
		z.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrNotStarted, err)
	}
	z.nextID++
	it := &Interp{z: z, id: z.nextID, sock: -1, out: -1, er: -1, msgs: make(chan zygoteMsg, 4), ended: make(chan struct{})}
	z.jobs[it.id] = it.msgs
	z.mu.Unlock()
	if err := it.start(ctx, s); err != nil {
		it.Close()
		return nil, err
	}
	return it, nil
}

func (it *Interp) start(ctx context.Context, s Spec) error {
	req, clones, err := it.z.runRequest(it.id, s, true)
	if err != nil {
		return err
	}
	defer closeFDs(clones)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("runner: context: socketpair: %w", err)
	}
	it.sock = pair[0]
	defer unix.Close(pair[1])
	if err := unix.SetNonblock(it.sock, true); err != nil {
		return fmt.Errorf("runner: context: %w", err)
	}
	var outW, errW int
	if it.out, outW, err = rawPipe(); err != nil {
		return err
	}
	defer unix.Close(outW)
	if it.er, errW, err = rawPipe(); err != nil {
		return err
	}
	defer unix.Close(errW)
	if _, _, err := it.z.conn.WriteMsgUnix(req, unix.UnixRights(append([]int{pair[1], outW, errW}, clones...)...), nil); err != nil {
		return fmt.Errorf("%w: send to zygote: %w", ErrNotStarted, err)
	}
	go it.watch()
	return it.awaitReady(ctx)
}

// watch follows the zygote's messages about the interpreter's process.
func (it *Interp) watch() {
	for {
		select {
		case m := <-it.msgs:
			switch m.Op {
			case opFailed:
				it.end(-1, "it could not start: "+m.Error)
				return
			case opExited:
				it.end(m.Status, "")
				return
			}
		case <-it.z.gone:
			it.end(-1, "its warm interpreter (zygote) died")
			return
		}
	}
}

func (it *Interp) end(status int, why string) {
	it.endOnce.Do(func() {
		it.z.mu.Lock()
		it.status = status
		if it.why == "" {
			it.why = why
		}
		it.z.mu.Unlock()
		close(it.ended)
	})
}

// awaitReady waits for context.py's first message.
func (it *Interp) awaitReady(ctx context.Context) error {
	deadline := time.Now().Add(interpReadyTimeout)
	buf := make([]byte, 4096)
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("runner: context: start: %w", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("runner: context: not ready after %s", interpReadyTimeout)
		}
		ready, err := it.poll(50 * time.Millisecond)
		if err != nil {
			return err
		}
		if !ready[0] {
			continue
		}
		n, err := unix.Read(it.sock, buf)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			return it.endedError()
		}
		var m struct{ Op string }
		if json.Unmarshal(buf[:n], &m) == nil && m.Op == "ready" {
			return nil
		}
	}
}

// poll waits up to d for the request channel or an output pipe to be
// readable (or closed): which of sock, out and err are.
func (it *Interp) poll(d time.Duration) ([3]bool, error) {
	fds := []unix.PollFd{{Fd: int32(it.sock), Events: unix.POLLIN}, {Fd: -1}, {Fd: -1}}
	// A pipe at its end of file (the cell closed its stdout) would wake
	// every poll: it is read no more.
	if !it.outEOF {
		fds[1] = unix.PollFd{Fd: int32(it.out), Events: unix.POLLIN}
	}
	if !it.errEOF {
		fds[2] = unix.PollFd{Fd: int32(it.er), Events: unix.POLLIN}
	}
	var r [3]bool
	_, err := unix.Poll(fds, int(d.Milliseconds()))
	if err != nil && err != unix.EINTR {
		return r, fmt.Errorf("runner: context: poll: %w", err)
	}
	for i, f := range fds {
		r[i] = f.Revents != 0
	}
	return r, nil
}

// drain reads what fd holds now into b, up to EAGAIN or end of file, and
// reports the end of file.
func drain(fd int, b *cappedBuffer, buf []byte) (eof bool) {
	for {
		n, err := unix.Read(fd, buf)
		if n > 0 {
			_, _ = b.Write(buf[:n])
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return err == nil && n == 0
		}
	}
}

// drainBoth reads what stdout and stderr hold now.
func (it *Interp) drainBoth(stdout, stderr *cappedBuffer, buf []byte) {
	if !it.outEOF {
		it.outEOF = drain(it.out, stdout, buf)
	}
	if !it.errEOF {
		it.errEOF = drain(it.er, stderr, buf)
	}
}

// codePiece is the most source one datagram carries: well under the
// sender's socket buffer, and context.py's read size.
const codePiece = 64 << 10

// Exec runs one cell and returns its outcome. An error wrapping
// ErrInterpEnded says the interpreter is gone (and with it the variables):
// killed after a cell ignored its interrupt for c.Grace, or ended by a limit
// or its own hand; the outcome holds what the cell wrote until then. A
// cancelled ctx interrupts the cell as its timeout does, and Exec returns
// ctx's error with the outcome.
func (it *Interp) Exec(ctx context.Context, c CellSpec) (CellOutcome, error) {
	it.mu.Lock()
	defer it.mu.Unlock()
	if it.closed {
		return CellOutcome{}, fmt.Errorf("%w: it was closed", ErrInterpEnded)
	}
	select {
	case <-it.ended:
		return CellOutcome{}, it.endedError()
	default:
	}
	limit := c.OutputLimit
	if limit <= 0 {
		limit = DefaultOutputLimit
	}
	grace := c.Grace
	if grace <= 0 {
		grace = DefaultInterruptGrace
	}
	stdout, stderr := &cappedBuffer{limit: limit}, &cappedBuffer{limit: limit}
	buf := make([]byte, 64<<10)
	// What the interpreter's leftovers wrote since the last call is not
	// this cell's: drop it.
	it.drainBoth(&cappedBuffer{}, &cappedBuffer{}, buf)
	it.seq++
	seq := it.seq
	start := time.Now()
	if err := it.send(seq, c.Code); err != nil {
		return CellOutcome{}, err
	}
	var (
		out       CellOutcome
		ctxErr    error
		interrupt time.Time // when the interrupt went out
		deadline  time.Time
	)
	if c.Timeout > 0 {
		deadline = start.Add(c.Timeout)
	}
	finish := func() {
		out.Duration = time.Since(start)
		out.Stdout, out.Stderr = stdout.Bytes(), stderr.Bytes()
		out.StdoutBytes, out.StderrBytes = stdout.Total(), stderr.Total()
		out.StdoutTruncated, out.StderrTruncated = stdout.Truncated(), stderr.Truncated()
	}
	for {
		now := time.Now()
		switch {
		case interrupt.IsZero() && ctxErr == nil && ctx.Err() != nil:
			ctxErr = ctx.Err()
			interrupt = now
			_ = it.sendJSON(map[string]any{"op": "interrupt", "seq": seq})
		case interrupt.IsZero() && !deadline.IsZero() && !now.Before(deadline):
			out.TimedOut = true
			interrupt = now
			_ = it.sendJSON(map[string]any{"op": "interrupt", "seq": seq})
		case !interrupt.IsZero() && now.Sub(interrupt) >= grace:
			it.kill(fmt.Sprintf("killed: the cell went on %s after its KeyboardInterrupt", grace))
			it.drainBoth(stdout, stderr, buf)
			finish()
			out.ExitCode, out.Signal = -1, "killed"
			return out, it.endedError()
		}
		wait := 50 * time.Millisecond
		if interrupt.IsZero() && !deadline.IsZero() {
			wait = min(wait, time.Until(deadline)+time.Millisecond)
		}
		ready, err := it.poll(max(wait, time.Millisecond))
		if err != nil {
			return out, err
		}
		if ready[1] || ready[2] {
			it.drainBoth(stdout, stderr, buf)
		}
		if !ready[0] {
			continue
		}
		// Everything the cell wrote before its "done" is in the pipes now.
		it.drainBoth(stdout, stderr, buf)
		done, ok, err := it.readDone(seq)
		if err != nil {
			finish()
			out.ExitCode = -1
			return out, err
		}
		if !ok {
			continue
		}
		finish()
		out.Error, out.Interrupted = done.Error, done.Interrupted
		if done.Error != "" {
			out.ExitCode = 1
		}
		return out, ctxErr
	}
}

// maxDone is the largest "done" read; context.py keeps its error text well
// under it.
const maxDone = 64 << 10

type cellDone struct {
	Op          string `json:"op"`
	Seq         int    `json:"seq"`
	Error       string `json:"error"`
	Interrupted bool   `json:"interrupted"`
}

// readDone reads one datagram of the channel: the cell's "done" (ok), or
// something else (not ok, ignored), or the end of the channel (an error:
// the interpreter is gone).
func (it *Interp) readDone(seq int) (cellDone, bool, error) {
	var d cellDone
	buf := make([]byte, maxDone)
	n, err := unix.Read(it.sock, buf)
	if err == unix.EAGAIN || err == unix.EINTR {
		return d, false, nil
	}
	if err != nil || n == 0 {
		// Its process is gone, or about to be: wait for the zygote's word.
		select {
		case <-it.ended:
		case <-time.After(zygoteKillGrace):
			it.kill("its request channel closed")
		}
		return d, false, it.endedError()
	}
	if json.Unmarshal(buf[:n], &d) != nil || d.Op != "done" || d.Seq != seq {
		return d, false, nil
	}
	return d, true, nil
}

func (it *Interp) send(seq int, code string) error {
	for rest := []byte(code); len(rest) > 0; {
		n := min(len(rest), codePiece)
		msg := append([]byte{'C'}, rest[:n]...)
		if err := it.write(msg); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return it.sendJSON(map[string]any{"op": "exec", "seq": seq})
}

func (it *Interp) sendJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return it.write(data)
}

// write sends one datagram, waiting while the channel's buffer is full (a
// cell that runs does not read): the interpreter reads it on a thread of its
// own.
func (it *Interp) write(msg []byte) error {
	for {
		_, err := unix.Write(it.sock, msg)
		switch {
		case err == nil:
			return nil
		case err == unix.EINTR || err == unix.EAGAIN:
			select {
			case <-it.ended:
				return it.endedError()
			case <-time.After(time.Millisecond):
			}
		default:
			select {
			case <-it.ended:
			case <-time.After(zygoteKillGrace):
			}
			return it.endedError()
		}
	}
}

// kill ends the interpreter's process group through the zygote and waits for
// the zygote to say so.
func (it *Interp) kill(why string) {
	select {
	case <-it.ended:
		return
	default:
	}
	it.z.mu.Lock()
	if it.why == "" {
		it.why = why
	}
	it.z.mu.Unlock()
	data, _ := json.Marshal(zygoteKill{Op: opKill, ID: it.id})
	_, _ = it.z.conn.Write(data)
	select {
	case <-it.ended:
	case <-time.After(zygoteKillGrace):
		it.z.log.Error("zygote did not report a killed context; stopping it", "pid", it.z.info.PID)
		it.z.fail(errors.New("runner: zygote did not answer a kill"))
		_ = it.z.cmd.Process.Kill()
		<-it.ended
	}
}

// Ended is closed once the interpreter's process is gone.
func (it *Interp) Ended() <-chan struct{} { return it.ended }

// endedError says how the interpreter ended.
func (it *Interp) endedError() error {
	<-it.ended
	it.z.mu.Lock()
	why := it.why
	it.z.mu.Unlock()
	if why == "" {
		ws := syscall.WaitStatus(it.status)
		switch {
		case it.status < 0:
			why = "its process is gone"
		case ws.Signaled():
			why = "its process was killed by signal " + ws.Signal().String()
		default:
			why = fmt.Sprintf("its process exited with status %d", ws.ExitStatus())
		}
	}
	return fmt.Errorf("%w: %s", ErrInterpEnded, why)
}

// Close kills the interpreter (if it still runs) and releases what it
// holds. It is idempotent.
func (it *Interp) Close() {
	it.closeOnce.Do(func() {
		// The kill first: a cell that runs returns once its process is gone,
		// and its call then lets go of the descriptors closed below.
		select {
		case <-it.ended:
		default:
			if it.sock >= 0 {
				it.kill("closed")
			} else {
				it.end(-1, "closed")
			}
		}
		it.mu.Lock()
		it.closed = true
		it.mu.Unlock()
		it.z.mu.Lock()
		delete(it.z.jobs, it.id)
		it.z.mu.Unlock()
		for _, fd := range []int{it.sock, it.out, it.er} {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if it.onClose != nil {
			it.onClose()
		}
	})
}

// rawPipe makes a pipe whose read end is ours, non-blocking, and whose
// write end (blocking) goes to the interpreter.
func rawPipe() (r, w int, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return -1, -1, fmt.Errorf("runner: pipe: %w", err)
	}
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return -1, -1, fmt.Errorf("runner: pipe: %w", err)
	}
	return p[0], p[1], nil
}
