package e2e

import (
	"bytes"
	"sync"
)

// Buffer is a goroutine-safe buffer for a process's output that signals
// every write, so that a reader can wait for a line without polling.
type Buffer struct {
	// Limit, when positive, is the most bytes kept: writes past it are
	// dropped. The start of a log holds what callers wait for.
	Limit int

	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

// Write appends p (or drops it past Limit) and wakes the waiters.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	if b.Limit > 0 && b.buf.Len() > b.Limit {
		return len(p), nil
	}
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Changed returns a channel closed at the next write. Take it before
// reading String, so that no write falls between the two.
func (b *Buffer) Changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}
