package worker

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/runner"
)

// streamEvery is the least time between two output messages of one job:
// enough for a client's idle timeout and a model following a long run, few
// enough to cost nothing next to the job.
const streamEvery = time.Second

// streamTail is the most of each stream's new output one message carries:
// its end, where the latest line is.
const streamTail = 400

// outputStream publishes a running job's output as progress lines (see
// Frontend.streamOutput): at most one message per interval, saying how
// much each stream has written so far and carrying the end of what is new
// since the last message. Watch is called by the runner with every write,
// from the goroutines copying the job's pipes; it only copies into a small
// buffer, so a job that writes fast is never slowed by the publishing.
type outputStream struct {
	publish func(line string)
	every   time.Duration

	mu       sync.Mutex
	streams  [2]streamState // stdout, stderr
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// streamState is what one stream wrote: in all, and the end of what is new.
type streamState struct {
	total int64
	fresh int64 // bytes written since the last message
	tail  []byte
}

// streamOutput makes spec publish the job's output while it runs when the
// job asks for progress (wire.Job.Progress: its caller sent a progress
// token); the returned function sends what is still new and stops.
func (w *Worker) streamOutput(spec *runner.Spec, job *wire.Job) (stop func()) {
	if !job.Progress {
		return func() {}
	}
	o := startOutputStream(func(line string) { _ = w.broker.PublishProgress(job.ID, line) }, streamEvery)
	spec.Watch = o.Watch
	return o.Close
}

// startOutputStream starts publishing; Close sends what is still new and
// stops.
func startOutputStream(publish func(string), every time.Duration) *outputStream {
	o := &outputStream{publish: publish, every: every, stop: make(chan struct{}), done: make(chan struct{})}
	go o.loop()
	return o
}

// Watch records p, written by the job on stream ("stdout" or "stderr").
func (o *outputStream) Watch(stream string, p []byte) {
	i := 0
	if stream == "stderr" {
		i = 1
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &o.streams[i]
	s.total += int64(len(p))
	s.fresh += int64(len(p))
	if len(p) >= streamTail {
		s.tail = append(s.tail[:0], p[len(p)-streamTail:]...)
		return
	}
	s.tail = append(s.tail, p...)
	if extra := len(s.tail) - streamTail; extra > 0 {
		s.tail = append(s.tail[:0], s.tail[extra:]...)
	}
}

func (o *outputStream) loop() {
	defer close(o.done)
	t := time.NewTicker(o.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			o.send()
		case <-o.stop:
			o.send()
			return
		}
	}
}

// send publishes one message when there is new output.
func (o *outputStream) send() {
	if msg := o.message(); msg != "" {
		o.publish(msg)
	}
}

// message returns the message for what is new, and marks it sent; "" when
// nothing is new.
func (o *outputStream) message() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.streams[0].fresh == 0 && o.streams[1].fresh == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "output so far: %d bytes of stdout, %d of stderr", o.streams[0].total, o.streams[1].total)
	for i, name := range []string{"stdout", "stderr"} {
		s := &o.streams[i]
		if s.fresh == 0 {
			continue
		}
		tail := validTail(s.tail)
		b.WriteString("\n[" + name + "] ")
		if s.fresh > int64(len(tail)) {
			b.WriteString("…")
		}
		b.Write(tail)
		s.fresh, s.tail = 0, s.tail[:0]
	}
	return b.String()
}

// validTail drops the bytes at the start of p that a cut left in the middle
// of a UTF-8 character.
func validTail(p []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(p); i++ {
		if utf8.RuneStart(p[i]) {
			return p[i:]
		}
	}
	return p
}

// Close sends what is still new and stops publishing. It is safe to call
// more than once.
func (o *outputStream) Close() {
	o.stopOnce.Do(func() { close(o.stop) })
	<-o.done
}
