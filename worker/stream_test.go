package worker

import (
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// collect returns an outputStream that never ticks during the test (a long
// interval) and the messages it published.
func collect(t *testing.T) (*outputStream, func() []string) {
	var mu sync.Mutex
	var got []string
	o := startOutputStream(func(s string) { mu.Lock(); got = append(got, s); mu.Unlock() }, time.Hour)
	t.Cleanup(o.Close)
	return o, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), got...) }
}

func TestOutputStreamSendsWhatIsNewOnClose(t *testing.T) {
	o, got := collect(t)
	o.Watch("stdout", []byte("step 1\n"))
	o.Watch("stderr", []byte("warning\n"))
	o.Watch("stdout", []byte("step 2\n"))
	o.Close()
	msgs := got()
	if len(msgs) != 1 {
		t.Fatalf("messages %q, want one", msgs)
	}
	for _, want := range []string{"14 bytes of stdout, 8 of stderr", "[stdout] step 1\nstep 2\n", "[stderr] warning\n"} {
		if !strings.Contains(msgs[0], want) {
			t.Errorf("message %q lacks %q", msgs[0], want)
		}
	}
}

func TestOutputStreamNothingNewNothingSent(t *testing.T) {
	o, got := collect(t)
	if m := o.message(); m != "" {
		t.Errorf("message with no output = %q", m)
	}
	o.Watch("stdout", []byte("x"))
	if m := o.message(); !strings.Contains(m, "[stdout] x") {
		t.Errorf("message = %q", m)
	}
	if m := o.message(); m != "" {
		t.Errorf("second message with nothing new = %q", m)
	}
	o.Watch("stderr", []byte("e"))
	m := o.message()
	if strings.Contains(m, "[stdout]") || !strings.Contains(m, "1 bytes of stdout, 1 of stderr") {
		t.Errorf("message after stderr only = %q", m)
	}
	o.Close()
	if msgs := got(); len(msgs) != 0 {
		t.Errorf("published %q; message() had taken everything", msgs)
	}
}

// A long run of output sends its end, marked as cut, and never a broken
// UTF-8 character.
func TestOutputStreamKeepsTheEnd(t *testing.T) {
	o, _ := collect(t)
	big := strings.Repeat("é", 3000) + "THE END"
	for i := 0; i < len(big); i += 7 {
		o.Watch("stdout", []byte(big[i:min(i+7, len(big))]))
	}
	m := o.message()
	_, out, _ := strings.Cut(m, "[stdout] ")
	if !strings.HasPrefix(out, "…") || !strings.HasSuffix(out, "THE END") || len(out) > streamTail+len("…") {
		t.Errorf("stdout part is %d bytes: %q...", len(out), out[:min(len(out), 40)])
	}
	if !utf8.ValidString(out) {
		t.Errorf("stdout part is not valid UTF-8")
	}
	if !strings.Contains(m, "6007 bytes of stdout") {
		t.Errorf("message %q does not count every byte", m[:80])
	}
	o.Watch("stdout", []byte(strings.Repeat("z", 5000)))
	if _, out, _ := strings.Cut(o.message(), "[stdout] "); len(out) != streamTail+len("…") {
		t.Errorf("one large write: stdout part is %d bytes, want %d", len(out), streamTail+len("…"))
	}
}
