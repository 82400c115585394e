package runner

import (
	"io"
	"sync"
)

// headTail is an io.Writer that keeps the first and the last bytes written
// to it, half of its limit each, and counts what it drops between them: when
// a job's output passes its cap, what it printed first (what it set out to
// do) and what it printed last (the error, usually) both stay. Write never
// fails, so the goroutine copying a child's pipe into it keeps draining the
// pipe and the child never blocks on a full one.
//
// With a spill function, the first write that passes the limit asks it for
// a writer and hands it the whole stream from its first byte, then every
// byte after: the caller keeps the complete output where it likes (the
// worker: a file of the session's working directory). The first failed
// write to it ends the spill; Spilled says how many bytes reached it.
//
// It is not safe for concurrent use; each stream has its own copying
// goroutine, and the outcome is read once that goroutine is done.
type headTail struct {
	limit int64
	head  []byte // the first bytes, up to limit-limit/2
	tail  []byte // the last bytes, up to limit/2, circular once full
	next  int    // where the next byte goes in a full tail
	total int64

	// watch, when set, sees every write as it comes (Spec.Watch).
	watch func([]byte)

	spill    func() io.Writer
	sink     io.Writer
	spilled  int64
	spillErr error
}

// copyBuffers are the buffers a job's output is copied from its pipes
// with. io.Copy made a 32 KiB buffer for each pipe of each job: a third of
// the bytes the whole server allocated per print(1) call, and as much
// garbage to collect (a collection every ten calls or so).
var copyBuffers = sync.Pool{New: func() any { return new([32 << 10]byte) }}

// copyOutput copies r into w until r's end or an error, through a pooled
// buffer. w must not keep what it is given (headTail copies it, and so
// must its watch and sink).
func copyOutput(w io.Writer, r io.Reader) {
	buf := copyBuffers.Get().(*[32 << 10]byte)
	defer copyBuffers.Put(buf)
	// struct{ io.Reader } hides *os.File's WriteTo, which would copy with a
	// buffer of its own.
	_, _ = io.CopyBuffer(w, struct{ io.Reader }{r}, buf[:])
}

// newHeadTail returns a headTail of limit bytes; spill may be nil.
func newHeadTail(limit int64, spill func() io.Writer) *headTail {
	return &headTail{limit: limit, spill: spill}
}

func (b *headTail) headCap() int64 { return b.limit - b.limit/2 }
func (b *headTail) tailCap() int64 { return b.limit / 2 }

func (b *headTail) Write(p []byte) (int, error) {
	if b.watch != nil {
		b.watch(p)
	}
	if b.total+int64(len(p)) > b.limit && b.sink == nil && b.spill != nil && b.spillErr == nil {
		b.startSpill()
	}
	b.total += int64(len(p))
	b.toSink(p)
	rest := p
	if room := b.headCap() - int64(len(b.head)); room > 0 {
		n := min(int64(len(rest)), room)
		b.head = appendBounded(b.head, rest[:n], b.headCap())
		rest = rest[n:]
	}
	b.keepTail(rest)
	return len(p), nil
}

// keepTail appends p to the tail, overwriting its oldest bytes once full.
func (b *headTail) keepTail(p []byte) {
	tc := int(b.tailCap())
	if tc == 0 || len(p) == 0 {
		return
	}
	if len(p) >= tc {
		// p alone fills the tail: keep its last bytes, in order.
		b.tail = appendBounded(b.tail[:0], p[len(p)-tc:], int64(tc))
		b.next = 0
		return
	}
	if room := tc - len(b.tail); room > 0 {
		n := min(len(p), room)
		b.tail = appendBounded(b.tail, p[:n], int64(tc))
		p = p[n:]
	}
	for len(p) > 0 {
		n := copy(b.tail[b.next:], p)
		p = p[n:]
		b.next = (b.next + n) % tc
	}
}

// appendBounded appends p to buf, growing by doubling but never past limit.
func appendBounded(buf, p []byte, limit int64) []byte {
	if need := len(buf) + len(p); need > cap(buf) {
		newCap := int(min(int64(max(2*cap(buf), need, 512)), limit))
		grown := make([]byte, len(buf), newCap)
		copy(grown, buf)
		buf = grown
	}
	return append(buf, p...)
}

// startSpill asks for the spill's writer and gives it everything so far,
// which is all still held: nothing is dropped before the limit is passed.
func (b *headTail) startSpill() {
	b.sink = b.spill()
	if b.sink == nil {
		b.spillErr = io.ErrClosedPipe
		return
	}
	b.toSink(b.head)
	b.toSink(b.tail) // not yet circular: the stream fitted the limit
}

func (b *headTail) toSink(p []byte) {
	if b.sink == nil || b.spillErr != nil || len(p) == 0 {
		return
	}
	n, err := b.sink.Write(p)
	b.spilled += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	b.spillErr = err
}

// Bytes returns the kept bytes: the head, then the tail in order. When
// Dropped is not 0, those bytes were between them, at offset Cut.
func (b *headTail) Bytes() []byte {
	out := make([]byte, 0, len(b.head)+len(b.tail))
	out = append(out, b.head...)
	out = append(out, b.tail[b.next:]...)
	return append(out, b.tail[:b.next]...)
}

// Total returns how many bytes were written, kept or not.
func (b *headTail) Total() int64 { return b.total }

// Dropped returns how many bytes were written and not kept.
func (b *headTail) Dropped() int64 { return b.total - int64(len(b.head)+len(b.tail)) }

// Cut is the offset in Bytes where dropped bytes were.
func (b *headTail) Cut() int { return len(b.head) }

// Spilled returns how many bytes reached the spill's writer; it equals
// Total unless the spill failed (or was never started).
func (b *headTail) Spilled() int64 { return b.spilled }

// keepers are the buffers of a job's stdout and stderr.
func (s Spec) keepers(limit int64) (stdout, stderr *headTail) {
	spill := func(stream string) func() io.Writer {
		if s.Spill == nil {
			return nil
		}
		return func() io.Writer { return s.Spill(stream) }
	}
	stdout, stderr = newHeadTail(limit, spill("stdout")), newHeadTail(limit, spill("stderr"))
	if s.Watch != nil {
		stdout.watch = func(p []byte) { s.Watch("stdout", p) }
		stderr.watch = func(p []byte) { s.Watch("stderr", p) }
	}
	return stdout, stderr
}

// fillOutput copies what the buffers kept into the outcome.
func (out *Outcome) fillOutput(stdout, stderr *headTail) {
	out.Stdout, out.Stderr = stdout.Bytes(), stderr.Bytes()
	out.StdoutBytes, out.StderrBytes = stdout.Total(), stderr.Total()
	out.StdoutTruncated, out.StderrTruncated = stdout.Dropped() > 0, stderr.Dropped() > 0
	out.StdoutCut, out.StderrCut = stdout.Cut(), stderr.Cut()
	out.StdoutSpilled, out.StderrSpilled = stdout.Spilled(), stderr.Spilled()
}
