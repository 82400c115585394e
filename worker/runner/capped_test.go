package runner

import (
	"bytes"
	"testing"
)

func TestCappedBuffer(t *testing.T) {
	t.Parallel()
	b := &cappedBuffer{limit: 10}
	for _, chunk := range []string{"abc", "defgh", "ijklmnop", "", "qrstuvwxyz"} {
		n, err := b.Write([]byte(chunk))
		if n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v; it must always accept everything", chunk, n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcdefghij" {
		t.Errorf("kept %q, want the first 10 bytes", got)
	}
	if b.Total() != 26 || !b.Truncated() {
		t.Errorf("Total %d, Truncated %v; want 26, true", b.Total(), b.Truncated())
	}
	if cap(b.Bytes()) > 10 {
		t.Errorf("buffer capacity %d exceeds the limit", cap(b.Bytes()))
	}
}

func TestCappedBufferUnderLimit(t *testing.T) {
	t.Parallel()
	b := &cappedBuffer{limit: 1 << 20}
	data := bytes.Repeat([]byte("x"), 1000)
	b.Write(data)
	if !bytes.Equal(b.Bytes(), data) || b.Truncated() || b.Total() != 1000 {
		t.Errorf("kept %d bytes, truncated %v, total %d", len(b.Bytes()), b.Truncated(), b.Total())
	}
	if cap(b.Bytes()) > 4096 {
		t.Errorf("capacity %d: the buffer must grow with the output, not reserve the limit", cap(b.Bytes()))
	}
}

func TestCappedBufferExactLimit(t *testing.T) {
	t.Parallel()
	b := &cappedBuffer{limit: 4}
	b.Write([]byte("abcd"))
	if b.Truncated() {
		t.Error("exactly limit bytes is not truncated")
	}
	b.Write(nil)
	if b.Truncated() {
		t.Error("an empty write truncates nothing")
	}
	b.Write([]byte("e"))
	if !b.Truncated() || string(b.Bytes()) != "abcd" {
		t.Errorf("kept %q, truncated %v", b.Bytes(), b.Truncated())
	}
}
