package statestore

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// holdCommit starts a write that does not finish until the returned
// release is called, so that the writes made meanwhile queue behind it.
func holdCommit(t *testing.T, s *BoltStore) (release func()) {
	t.Helper()
	entered, gate := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.update(func(tx *bolt.Tx) error {
			close(entered)
			<-gate
			return tx.Bucket(bucketHashes).Put([]byte("held"), []byte("1"))
		})
	}()
	<-entered
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(gate)
			if err := <-done; err != nil {
				t.Errorf("the held write: %v", err)
			}
		})
	}
	t.Cleanup(release) // before the store closes, should the test stop early
	return release
}

// awaitQueued waits until n writes wait in s's queue.
func awaitQueued(t *testing.T, s *BoltStore, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.group.mu.Lock()
		q := len(s.group.queue)
		s.group.mu.Unlock()
		if q == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", q, n)
		}
	}
}

// The writes that queue while a commit runs are committed together, in
// one transaction (one pair of syncs), and each returns its own outcome.
func TestBoltWritesQueuedDuringACommitShareTheNextOne(t *testing.T) {
	t.Parallel()
	s := openTestBolt(t)
	release := holdCommit(t, s)
	const n = 8
	var mu sync.Mutex
	txs := map[int]bool{}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.update(func(tx *bolt.Tx) error {
				mu.Lock()
				txs[tx.ID()] = true
				mu.Unlock()
				return tx.Bucket(bucketHashes).Put(fmt.Appendf(nil, "k%d", i), []byte("v"))
			})
		}()
	}
	awaitQueued(t, s, n)
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if len(txs) != 1 {
		t.Errorf("%d queued writes committed in %d transactions, want 1", n, len(txs))
	}
	for i := range n {
		err := s.db.View(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketHashes).Get(fmt.Appendf(nil, "k%d", i)) == nil {
				return errors.New("missing")
			}
			return nil
		})
		if err != nil {
			t.Errorf("write %d not stored: %v", i, err)
		}
	}
}

// A write that fails (or panics) in a shared transaction gets its own
// error, and the others are stored all the same; counted writes that each fit the quota
// alone but not together are refused one by one, as if run in turn.
func TestBoltGroupedWriteFailuresStayTheirOwn(t *testing.T) {
	t.Parallel()
	s := openTestBolt(t)
	ctx := t.Context()
	q := Quota{Key: "usage", Limit: 10}
	release := holdCommit(t, s)
	boom := errors.New("boom")
	var wg sync.WaitGroup
	var failErr, okErr error
	counted := make([]error, 3)
	wg.Add(2)
	go func() { defer wg.Done(); failErr = s.update(func(*bolt.Tx) error { return boom }) }()
	awaitQueued(t, s, 1)
	var panicErr error
	wg.Add(1)
	go func() { defer wg.Done(); panicErr = s.update(func(*bolt.Tx) error { panic("bug") }) }()
	awaitQueued(t, s, 2)
	go func() { defer wg.Done(); okErr = s.HSet(ctx, "h", "f", []byte("v")) }()
	awaitQueued(t, s, 3)
	for i := range counted {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, counted[i] = s.SetCounted(ctx, fmt.Sprintf("c%d", i), []byte("12345"), q)
		}()
		awaitQueued(t, s, 4+i)
	}
	release()
	wg.Wait()
	if !errors.Is(failErr, boom) {
		t.Errorf("failing write returned %v, want its own error", failErr)
	}
	if panicErr == nil || !strings.Contains(panicErr.Error(), "panicked: bug") {
		t.Errorf("panicking write returned %v, want its panic as its error", panicErr)
	}
	if okErr != nil {
		t.Errorf("write queued with a failing one: %v", okErr)
	}
	if v, err := s.HGet(ctx, "h", "f"); err != nil || string(v) != "v" {
		t.Errorf("HGet after the shared commit = %q, %v", v, err)
	}
	refused := 0
	for i, err := range counted {
		var qe *QuotaError
		switch {
		case errors.As(err, &qe):
			refused++
		case err != nil:
			t.Errorf("counted write %d: %v", i, err)
		}
	}
	if refused != 1 {
		t.Errorf("%d of 3 writes of 5 bytes refused by a 10-byte quota, want 1 (%v)", refused, counted)
	}
	if used, err := s.Get(ctx, "usage"); err != nil || string(used) != "10" {
		t.Errorf("quota counter = %q, %v; want 10", used, err)
	}
}
