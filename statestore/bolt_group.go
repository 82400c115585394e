package statestore

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	bolt "go.etcd.io/bbolt"
)

// Group commit. Every bbolt commit writes its pages, syncs the file, writes
// the meta page and syncs again: two fdatasync calls, milliseconds of wall
// time on a busy disk, during which no other write can start (bbolt has one
// writer). `codexec dev` makes three writes per call (the run record, the
// session's last write, the audit record), so with a few callers at once
// the writes queued behind each other's syncs, and a worker's slot stayed
// taken for the audit record's turn.
//
// update coalesces the writes that arrive while a commit is under way into
// the next commit: the first writer commits its own write at once (no delay
// when nothing else writes); the writes that queued meanwhile are then
// committed together, in one transaction, by the first of them, which is
// handed the lead. Each write still returns only once its transaction is
// synced, so nothing is acknowledged before it is durable.
//
// The writes of one transaction run in the order they queued, as if one
// after the other. When one of them fails (a quota refusal, a value too
// large), the transaction is rolled back, the failed write is run alone so
// that its error (or its success, should the others' writes have been what
// refused it) is its own, and the others are committed again without it:
// a write's function may therefore run more than once, and must set
// whatever it reports from scratch on every run.

// boltWrite is one write waiting for its commit.
type boltWrite struct {
	fn   func(*bolt.Tx) error
	done chan error // its outcome, or errLead: commit the queue
}

// errLead tells a queued writer that it commits the queue next.
var errLead = errors.New("statestore: lead the next commit")

// boltGroup is a BoltStore's queue of writes.
type boltGroup struct {
	mu         sync.Mutex
	committing bool         // a writer is committing or about to
	queue      []*boltWrite // writes for the next commit
}

// update runs fn in a write transaction, committed (and synced) with the
// writes that queued while the previous commit ran.
func (s *BoltStore) update(fn func(*bolt.Tx) error) error {
	w := &boltWrite{fn: panicAsError(fn), done: make(chan error, 1)}
	g := &s.group
	g.mu.Lock()
	g.queue = append(g.queue, w)
	if g.committing {
		g.mu.Unlock()
		if err := <-w.done; err != errLead {
			return err
		}
	} else {
		g.committing = true
		g.mu.Unlock()
	}
	g.mu.Lock()
	batch := g.queue
	g.queue = nil
	g.mu.Unlock()
	s.commitGroup(batch)
	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].done <- errLead
	} else {
		g.committing = false
	}
	g.mu.Unlock()
	return <-w.done
}

// commitGroup commits batch in one transaction and tells each write its
// outcome; a write that fails is run alone, and the others again without
// it.
func (s *BoltStore) commitGroup(batch []*boltWrite) {
	for len(batch) > 0 {
		if len(batch) == 1 {
			batch[0].done <- s.db.Update(batch[0].fn)
			return
		}
		failed := -1
		err := s.db.Update(func(tx *bolt.Tx) error {
			for i, w := range batch {
				if err := w.fn(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			for _, w := range batch {
				w.done <- err // nil, or the commit's own failure
			}
			return
		}
		batch[failed].done <- s.db.Update(batch[failed].fn)
		batch = append(batch[:failed:failed], batch[failed+1:]...)
	}
}

// panicAsError returns fn with a panic turned into its error: a write
// that panics in a shared transaction must not leave the writers queued
// behind it waiting for ever, so it fails alone (and the transaction is
// rolled back) like a write that returned an error.
func panicAsError(fn func(*bolt.Tx) error) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("statestore: bolt write panicked: %v\n%s", r, debug.Stack())
			}
		}()
		return fn(tx)
	}
}
