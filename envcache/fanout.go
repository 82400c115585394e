package envcache

import (
	"io"
	"sync"
)

// fanout copies a build's output to every waiter's progress writer. A
// writer that fails is dropped; the build goes on.
type fanout struct {
	mu   sync.Mutex
	next int
	ws   map[int]io.Writer
}

func (f *fanout) add(w io.Writer) int {
	if w == nil {
		return -1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ws == nil {
		f.ws = map[int]io.Writer{}
	}
	f.next++
	f.ws[f.next] = w
	return f.next
}

func (f *fanout) remove(token int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ws, token)
}

func (f *fanout) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for token, w := range f.ws {
		if _, err := w.Write(p); err != nil {
			delete(f.ws, token)
		}
	}
	return len(p), nil
}
