package runner

// cappedBuffer is an io.Writer that keeps the first limit bytes written to it
// and counts, then discards, everything after. Write never fails, so the
// goroutine copying a child's pipe into it keeps draining the pipe and the
// child never blocks on a full one.
//
// It is not safe for concurrent use; os/exec gives each stream its own
// copying goroutine and Cmd.Wait waits for them before Run reads the buffer.
type cappedBuffer struct {
	limit int64
	buf   []byte
	total int64
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	room := b.limit - int64(len(b.buf))
	if room <= 0 {
		return len(p), nil
	}
	keep := p
	if int64(len(keep)) > room {
		keep = keep[:room]
	}
	if need := len(b.buf) + len(keep); need > cap(b.buf) {
		// Grow by doubling, but never past the limit: append's own growth
		// could reserve up to twice the limit.
		newCap := max(2*cap(b.buf), need, 512)
		newCap = int(min(int64(newCap), b.limit))
		grown := make([]byte, len(b.buf), newCap)
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, keep...)
	return len(p), nil
}

// Bytes returns the kept bytes.
func (b *cappedBuffer) Bytes() []byte { return b.buf }

// Total returns how many bytes were written, kept or not.
func (b *cappedBuffer) Total() int64 { return b.total }

// Truncated reports whether bytes were discarded.
func (b *cappedBuffer) Truncated() bool { return b.total > int64(len(b.buf)) }
