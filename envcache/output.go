package envcache

import "fmt"

// Bounds on the installer output kept for a BuildError: the head says what
// was being done, the tail says what went wrong.
const (
	outputHeadMax = 8 << 10
	outputTailMax = 56 << 10
)

// cappedOutput is an io.Writer that keeps the first outputHeadMax and the
// last outputTailMax bytes written to it, so a chatty installer cannot grow
// the worker's memory. Use one value for both stdout and stderr: os/exec then
// copies both through a single goroutine.
type cappedOutput struct {
	head, tail []byte
	total      int64
}

func (o *cappedOutput) Write(p []byte) (int, error) {
	n := len(p)
	o.total += int64(n)
	if room := outputHeadMax - len(o.head); room > 0 {
		k := min(room, len(p))
		o.head = append(o.head, p[:k]...)
		p = p[k:]
	}
	o.tail = append(o.tail, p...)
	if len(o.tail) > 2*outputTailMax {
		// Compact now and then rather than on every write.
		o.tail = append([]byte(nil), o.tail[len(o.tail)-outputTailMax:]...)
	}
	return n, nil
}

// String returns the kept output, with a line in place of what was dropped.
func (o *cappedOutput) String() string {
	tail := o.tail
	if len(tail) > outputTailMax {
		tail = tail[len(tail)-outputTailMax:]
	}
	omitted := o.total - int64(len(o.head)) - int64(len(tail))
	if omitted == 0 {
		return string(o.head) + string(tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes omitted ...]\n%s", o.head, omitted, tail)
}
