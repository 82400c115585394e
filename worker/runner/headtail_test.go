package runner

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
)

// TestHeadTail writes streams of many lengths in chunks of many sizes and
// checks that the buffer keeps exactly the first and the last bytes, never
// more than its limit, and spills the whole stream once it passes it.
func TestHeadTail(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, limit := range []int64{1, 2, 10, 101, 4096} {
		for _, n := range []int{0, 1, int(limit) - 1, int(limit), int(limit) + 1, 3 * int(limit), 10000} {
			if n < 0 {
				continue
			}
			stream := make([]byte, n)
			for i := range stream {
				stream[i] = byte('a' + rng.IntN(26))
			}
			var spill bytes.Buffer
			spilled := 0
			b := newHeadTail(limit, func() io.Writer { spilled++; return &spill })
			for rest := stream; len(rest) > 0; {
				k := min(len(rest), 1+rng.IntN(int(limit)*2+3))
				if got, err := b.Write(rest[:k]); got != k || err != nil {
					t.Fatalf("Write = %d, %v; it must accept everything", got, err)
				}
				rest = rest[k:]
			}
			kept := b.Bytes()
			if int64(n) <= limit {
				if !bytes.Equal(kept, stream) || b.Dropped() != 0 || spilled != 0 {
					t.Errorf("limit %d, %d bytes: kept %d, dropped %d, spilled %d times; want all kept, no spill", limit, n, len(kept), b.Dropped(), spilled)
				}
				continue
			}
			head, tail := int(limit-limit/2), int(limit/2)
			want := append(append([]byte{}, stream[:head]...), stream[n-tail:]...)
			if !bytes.Equal(kept, want) || b.Cut() != head || b.Dropped() != int64(n-head-tail) || b.Total() != int64(n) {
				t.Errorf("limit %d, %d bytes: kept %q cut at %d, dropped %d; want %q cut at %d, dropped %d",
					limit, n, kept, b.Cut(), b.Dropped(), want, head, n-head-tail)
			}
			if int64(cap(b.head)+cap(b.tail)) > limit {
				t.Errorf("limit %d: buffers hold %d bytes", limit, cap(b.head)+cap(b.tail))
			}
			if spilled != 1 || !bytes.Equal(spill.Bytes(), stream) || b.Spilled() != int64(n) {
				t.Errorf("limit %d, %d bytes: spill asked %d times, got %d bytes (equal %v); want once, the whole stream",
					limit, n, spilled, spill.Len(), bytes.Equal(spill.Bytes(), stream))
			}
		}
	}
}

// failAfter accepts n bytes, then fails.
type failAfter struct{ n int }

func (w *failAfter) Write(p []byte) (int, error) {
	k := min(len(p), w.n)
	w.n -= k
	if k < len(p) {
		return k, errors.New("no space left")
	}
	return k, nil
}

// TestHeadTailSpillFails: a failed spill stops, counts what got through,
// and keeps the output itself whole.
func TestHeadTailSpillFails(t *testing.T) {
	t.Parallel()
	b := newHeadTail(10, func() io.Writer { return &failAfter{n: 25} })
	for range 10 {
		b.Write([]byte("0123456789"))
	}
	if b.Spilled() != 25 || b.Total() != 100 || string(b.Bytes()) != "0123456789" || b.Cut() != 5 {
		t.Errorf("spilled %d of %d, kept %q cut %d; want 25 of 100, \"0123456789\" cut 5", b.Spilled(), b.Total(), b.Bytes(), b.Cut())
	}
	none := newHeadTail(4, func() io.Writer { return nil })
	none.Write([]byte("abcdefgh"))
	if none.Spilled() != 0 || string(none.Bytes()) != "abgh" {
		t.Errorf("no spill writer: spilled %d, kept %q", none.Spilled(), none.Bytes())
	}
}

// copyOutput copies a job's pipe whole, through buffers it reuses: io.Copy
// made a 32 KiB one per pipe per job, a third of what a call allocated.
func TestCopyOutputReusesItsBuffer(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 5000) // 80,000 bytes: more than one buffer
	f, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	copyFile := func(w io.Writer) {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		copyOutput(w, f)
	}
	b := newHeadTail(int64(len(data)), nil)
	copyFile(b)
	if !bytes.Equal(b.Bytes(), data) {
		t.Fatalf("copied %d bytes, not the %d written", len(b.Bytes()), len(data))
	}
	sink := newHeadTail(16, nil) // keeps 16 bytes: allocates nothing once full
	copyFile(sink)
	// Without reuse each copy makes a 32 KiB buffer. With it, close to
	// nothing, but under the race detector sync.Pool drops a quarter of
	// what it is given (8 KiB a copy on average), and other goroutines of
	// the test binary allocate meanwhile: half a buffer is the bound.
	const n = 200
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		copyFile(sink)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 16<<10 {
		t.Errorf("each copy allocated %d bytes; want the buffer reused", per)
	}
}
