// Package storetest is the conformance suite every statestore.Store
// implementation must pass. Implementations call Run from their own tests
// (and RunRestart where state is meant to outlive the process).
//
// Subtests run in parallel and isolate themselves by unique key names, never
// by flushing the store, so one Redis server can serve them all.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
)

const (
	// shortTTL is the ttl for values a test waits to see expire.
	shortTTL = 50 * time.Millisecond
	// longTTL is the ttl for values a test expects to outlive it.
	longTTL = time.Hour
	// waitTimeout bounds every wait for an expiry to become visible.
	waitTimeout = 10 * time.Second
	// pollInterval is how often an expiry wait looks again.
	pollInterval = 10 * time.Millisecond
)

// NewStoreFunc returns a fresh, open store for one subtest. Run closes it when
// the subtest ends; newStore may register its own cleanup as well, since
// Close is idempotent.
type NewStoreFunc func(t *testing.T) statestore.Store

var prefixSeq atomic.Int64

// bundle is what every subtest starts from.
type bundle struct {
	ctx   context.Context
	store statestore.Store
	// prefix is unique to the subtest (and the test run); every key it uses
	// starts with it.
	prefix string
}

func (b bundle) key(name string) string { return b.prefix + name }

func setup(t *testing.T, newStore NewStoreFunc) bundle {
	t.Helper()
	s := newStore(t)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return bundle{
		ctx:    t.Context(),
		store:  s,
		prefix: fmt.Sprintf("storetest:%d:%d:%s:", time.Now().UnixNano(), prefixSeq.Add(1), t.Name()),
	}
}

// Run runs the conformance suite against the stores newStore returns.
func Run(t *testing.T, newStore NewStoreFunc) {
	t.Helper()

	t.Run("GetSetNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("k")
		_, err := b.store.Get(b.ctx, k)
		requireIs(t, err, statestore.ErrNotFound, "Get of a missing key")
		_, err = b.store.Len(b.ctx, k)
		requireIs(t, err, statestore.ErrNotFound, "Len of a missing key")

		requireNoErr(t, b.store.Set(b.ctx, k, []byte("one"), 0), "Set")
		requireValue(t, b, k, "one")
		requireNoErr(t, b.store.Set(b.ctx, k, []byte("two!"), 0), "Set over a value")
		requireValue(t, b, k, "two!")

		empty := b.key("empty")
		requireNoErr(t, b.store.Set(b.ctx, empty, nil, 0), "Set of an empty value")
		requireValue(t, b, empty, "")
		requireLen(t, b, empty, 0)
	})

	t.Run("BinaryAndLargeValues", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		bin := []byte{0, 1, 0, 0xff, '\r', '\n', 0, 0x80}
		requireNoErr(t, b.store.Set(b.ctx, b.key("bin"), bin, 0), "Set binary")
		requireValue(t, b, b.key("bin"), string(bin))

		large := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		requireNoErr(t, b.store.Set(b.ctx, b.key("large"), large, 0), "Set 1 MiB")
		requireValue(t, b, b.key("large"), string(large))

		// Keys with separators and NUL bytes must not collide with their prefixes.
		odd := b.key("a\x00b:c")
		requireNoErr(t, b.store.Set(b.ctx, odd, []byte("odd"), 0), "Set odd key")
		requireNoErr(t, b.store.Set(b.ctx, b.key("a"), []byte("plain"), 0), "Set plain key")
		requireValue(t, b, odd, "odd")
		requireValue(t, b, b.key("a"), "plain")
	})

	t.Run("TTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		short, long, noTTL := b.key("short"), b.key("long"), b.key("none")
		requireNoErr(t, b.store.Set(b.ctx, long, []byte("l"), longTTL), "Set long ttl")
		requireNoErr(t, b.store.Set(b.ctx, noTTL, []byte("n"), shortTTL), "Set short ttl")
		// A Set without ttl clears the earlier one.
		requireNoErr(t, b.store.Set(b.ctx, noTTL, []byte("n"), 0), "Set no ttl")
		requireNoErr(t, b.store.Set(b.ctx, short, []byte("s"), shortTTL), "Set short ttl")

		waitNotFound(t, b, short)
		_, err := b.store.Len(b.ctx, short)
		requireIs(t, err, statestore.ErrNotFound, "Len of an expired key")
		requireValue(t, b, long, "l")
		requireValue(t, b, noTTL, "n")
	})

	t.Run("SetNX", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("lock")
		ok, err := b.store.SetNX(b.ctx, k, []byte("first"), 0)
		requireNoErr(t, err, "SetNX on a missing key")
		if !ok {
			t.Fatal("SetNX on a missing key reported false")
		}
		ok, err = b.store.SetNX(b.ctx, k, []byte("second"), 0)
		requireNoErr(t, err, "SetNX on an existing key")
		if ok {
			t.Fatal("SetNX on an existing key reported true")
		}
		requireValue(t, b, k, "first")

		// An expired key counts as missing.
		k = b.key("lease")
		ok, err = b.store.SetNX(b.ctx, k, []byte("a"), shortTTL)
		requireNoErr(t, err, "SetNX with ttl")
		if !ok {
			t.Fatal("SetNX with ttl on a missing key reported false")
		}
		waitNotFound(t, b, k)
		ok, err = b.store.SetNX(b.ctx, k, []byte("b"), longTTL)
		requireNoErr(t, err, "SetNX after expiry")
		if !ok {
			t.Fatal("SetNX after expiry reported false")
		}
		requireValue(t, b, k, "b")
	})

	t.Run("SetNXConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("lock")
		var wins atomic.Int64
		runConcurrently(t, 16, func(i int) error {
			ok, err := b.store.SetNX(b.ctx, k, fmt.Appendf(nil, "%d", i), longTTL)
			if ok {
				wins.Add(1)
			}
			return err
		})
		if n := wins.Load(); n != 1 {
			t.Fatalf("%d concurrent SetNX calls won, want exactly 1", n)
		}
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k1, k2, h, p := b.key("k1"), b.key("k2"), b.key("hash"), b.key("presence")
		requireNoErr(t, b.store.Set(b.ctx, k1, []byte("1"), 0), "Set")
		_, err := b.store.Append(b.ctx, k2, []byte("2"), 0)
		requireNoErr(t, err, "Append")
		requireNoErr(t, b.store.HSet(b.ctx, h, "f", []byte("v")), "HSet")
		requireNoErr(t, b.store.Touch(b.ctx, p, "m", []byte("d"), longTTL), "Touch")

		requireNoErr(t, b.store.Delete(b.ctx), "Delete of no keys")
		requireNoErr(t, b.store.Delete(b.ctx, k1, k2, h, p, b.key("missing")), "Delete")
		for _, k := range []string{k1, k2} {
			_, err := b.store.Get(b.ctx, k)
			requireIs(t, err, statestore.ErrNotFound, "Get after Delete")
		}
		if n, err := b.store.HLen(b.ctx, h); err != nil || n != 0 {
			t.Fatalf("HLen after Delete = %d, %v; want 0, nil", n, err)
		}
		if m, err := b.store.Members(b.ctx, p); err != nil || len(m) != 0 {
			t.Fatalf("Members after Delete = %v, %v; want none", m, err)
		}
	})

	t.Run("Append", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("buf")
		requireAppend(t, b, k, "hello", 0, 5)
		requireAppend(t, b, k, ", ", 0, 7)
		requireAppend(t, b, k, "world", 0, 12)
		requireValue(t, b, k, "hello, world")
		requireLen(t, b, k, 12)

		// Appending to a value written by Set continues it.
		k2 := b.key("set-then-append")
		requireNoErr(t, b.store.Set(b.ctx, k2, []byte("ab"), 0), "Set")
		requireAppend(t, b, k2, "cd", 0, 4)
		requireValue(t, b, k2, "abcd")

		// Appending nothing still creates the value.
		k3 := b.key("empty")
		requireAppend(t, b, k3, "", 0, 0)
		requireValue(t, b, k3, "")
	})

	t.Run("AppendMaxLen", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("buf")
		requireAppend(t, b, k, "12345", 10, 5)
		requireAppend(t, b, k, "67890", 10, 10) // exactly at the limit is allowed
		_, err := b.store.Append(b.ctx, k, []byte("x"), 10)
		requireIs(t, err, statestore.ErrTooLarge, "Append past maxLen")
		requireValue(t, b, k, "1234567890")
		requireLen(t, b, k, 10)
		// A larger limit lets it grow again.
		requireAppend(t, b, k, "x", 11, 11)

		// A refused first append creates nothing.
		k2 := b.key("never")
		_, err = b.store.Append(b.ctx, k2, []byte("too long"), 3)
		requireIs(t, err, statestore.ErrTooLarge, "Append past maxLen to a missing key")
		_, err = b.store.Get(b.ctx, k2)
		requireIs(t, err, statestore.ErrNotFound, "Get after a refused Append")
	})

	t.Run("AppendBinary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("bin")
		pieces := [][]byte{{0}, {0, 0, 1}, {0xff, 0xfe}, {}, {'\n', 0}}
		var want []byte
		for _, p := range pieces {
			want = append(want, p...)
			requireAppend(t, b, k, string(p), 0, int64(len(want)))
		}
		requireValue(t, b, k, string(want))
	})

	t.Run("AppendKeepsTTLAndRestartsAfterExpiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		// If the machine is so slow that the value expires before Append
		// reaches it, Append starts a new value without a ttl; try again.
		var k string
		for attempt := 0; ; attempt++ {
			k = b.key(fmt.Sprintf("buf%d", attempt))
			requireNoErr(t, b.store.Set(b.ctx, k, []byte("old"), shortTTL), "Set short ttl")
			n, err := b.store.Append(b.ctx, k, []byte("+more"), 0)
			requireNoErr(t, err, "Append")
			if n == int64(len("old+more")) {
				break
			}
			if attempt == 10 {
				t.Fatalf("value with ttl %v expired before Append reached it, %d times", shortTTL, attempt+1)
			}
		}
		waitNotFound(t, b, k) // Append kept the ttl
		requireAppend(t, b, k, "new", 0, 3)
		requireValue(t, b, k, "new")
	})

	t.Run("AppendConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("buf")
		const goroutines, perGoroutine = 64, 4
		piece := func(g, i int) string { return fmt.Sprintf("<%02d.%d:%s>", g, i, strings.Repeat("x", g)) }
		runConcurrently(t, goroutines, func(g int) error {
			for i := range perGoroutine {
				if _, err := b.store.Append(b.ctx, k, []byte(piece(g, i)), 0); err != nil {
					return err
				}
			}
			return nil
		})
		var total int
		for g := range goroutines {
			for i := range perGoroutine {
				total += len(piece(g, i))
			}
		}
		requireLen(t, b, k, int64(total))
		v, err := b.store.Get(b.ctx, k)
		requireNoErr(t, err, "Get")
		if len(v) != total {
			t.Fatalf("value is %d bytes, want %d", len(v), total)
		}
		for g := range goroutines {
			for i := range perGoroutine {
				if n := bytes.Count(v, []byte(piece(g, i))); n != 1 {
					t.Fatalf("piece %q appears %d times, want 1", piece(g, i), n)
				}
			}
		}
	})

	t.Run("AppendConcurrentMaxLen", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("buf")
		const goroutines, pieceLen, maxLen = 64, 10, 320
		var ok, refused atomic.Int64
		runConcurrently(t, goroutines, func(g int) error {
			_, err := b.store.Append(b.ctx, k, bytes.Repeat([]byte{byte('A' + g%26)}, pieceLen), maxLen)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, statestore.ErrTooLarge):
				refused.Add(1)
			default:
				return err
			}
			return nil
		})
		if ok.Load() != maxLen/pieceLen || refused.Load() != goroutines-maxLen/pieceLen {
			t.Fatalf("%d appends succeeded and %d were refused, want %d and %d",
				ok.Load(), refused.Load(), maxLen/pieceLen, goroutines-maxLen/pieceLen)
		}
		requireLen(t, b, k, maxLen)
	})

	t.Run("Hash", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		h := b.key("h")
		_, err := b.store.HGet(b.ctx, h, "f")
		requireIs(t, err, statestore.ErrNotFound, "HGet on a missing hash")
		all, err := b.store.HGetAll(b.ctx, h)
		requireNoErr(t, err, "HGetAll on a missing hash")
		if all == nil || len(all) != 0 {
			t.Fatalf("HGetAll on a missing hash = %#v, want an empty map", all)
		}
		if n, err := b.store.HLen(b.ctx, h); err != nil || n != 0 {
			t.Fatalf("HLen on a missing hash = %d, %v; want 0, nil", n, err)
		}

		requireNoErr(t, b.store.HSet(b.ctx, h, "a", []byte("1")), "HSet")
		requireNoErr(t, b.store.HSet(b.ctx, h, "b:c", []byte{0, 1, 0}), "HSet binary")
		requireNoErr(t, b.store.HSet(b.ctx, h, "empty", nil), "HSet empty")
		requireNoErr(t, b.store.HSet(b.ctx, h, "a", []byte("one")), "HSet over a field")
		// A hash whose key extends h's must stay separate.
		requireNoErr(t, b.store.HSet(b.ctx, h+"x", "a", []byte("other")), "HSet other hash")

		v, err := b.store.HGet(b.ctx, h, "a")
		requireNoErr(t, err, "HGet")
		requireEqual(t, v, "one", "HGet a")
		_, err = b.store.HGet(b.ctx, h, "missing")
		requireIs(t, err, statestore.ErrNotFound, "HGet of a missing field")

		all, err = b.store.HGetAll(b.ctx, h)
		requireNoErr(t, err, "HGetAll")
		want := map[string]string{"a": "one", "b:c": "\x00\x01\x00", "empty": ""}
		requireMap(t, all, want, "HGetAll")
		if n, err := b.store.HLen(b.ctx, h); err != nil || n != 3 {
			t.Fatalf("HLen = %d, %v; want 3, nil", n, err)
		}

		requireNoErr(t, b.store.HDel(b.ctx, h), "HDel of no fields")
		requireNoErr(t, b.store.HDel(b.ctx, h, "a", "missing"), "HDel")
		_, err = b.store.HGet(b.ctx, h, "a")
		requireIs(t, err, statestore.ErrNotFound, "HGet after HDel")
		if n, err := b.store.HLen(b.ctx, h); err != nil || n != 2 {
			t.Fatalf("HLen after HDel = %d, %v; want 2, nil", n, err)
		}
		requireNoErr(t, b.store.HDel(b.ctx, h, "b:c", "empty"), "HDel the rest")
		all, err = b.store.HGetAll(b.ctx, h)
		requireNoErr(t, err, "HGetAll after emptying")
		requireMap(t, all, map[string]string{}, "HGetAll after emptying")
		v, err = b.store.HGet(b.ctx, h+"x", "a")
		requireNoErr(t, err, "HGet other hash")
		requireEqual(t, v, "other", "HGet other hash")
	})

	t.Run("Presence", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		set := b.key("workers")
		m, err := b.store.Members(b.ctx, set)
		requireNoErr(t, err, "Members of a missing set")
		if m == nil || len(m) != 0 {
			t.Fatalf("Members of a missing set = %#v, want an empty map", m)
		}

		requireNoErr(t, b.store.Touch(b.ctx, set, "w1", []byte("v1"), longTTL), "Touch w1")
		requireNoErr(t, b.store.Touch(b.ctx, set, "w2", []byte{0, 2}, longTTL), "Touch w2")
		requireNoErr(t, b.store.Touch(b.ctx, set+"x", "w9", []byte("other"), longTTL), "Touch other set")
		requireMembers(t, b, set, map[string]string{"w1": "v1", "w2": "\x00\x02"})

		// Touching again replaces the data.
		requireNoErr(t, b.store.Touch(b.ctx, set, "w1", []byte("v1 again"), longTTL), "Touch w1 again")
		requireMembers(t, b, set, map[string]string{"w1": "v1 again", "w2": "\x00\x02"})

		requireNoErr(t, b.store.Leave(b.ctx, set, "w2"), "Leave")
		requireNoErr(t, b.store.Leave(b.ctx, set, "missing"), "Leave of a missing member")
		requireMembers(t, b, set, map[string]string{"w1": "v1 again"})
		requireMembers(t, b, set+"x", map[string]string{"w9": "other"})

		if err := b.store.Touch(b.ctx, set, "w3", nil, 0); err == nil {
			t.Fatal("Touch with ttl 0 succeeded, want an error")
		}
	})

	t.Run("PresenceExpiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		set := b.key("workers")
		requireNoErr(t, b.store.Touch(b.ctx, set, "stays", []byte("s"), longTTL), "Touch stays")
		// refreshed starts short but is touched again with a long ttl; gone
		// (touched after it) expiring proves refreshed's first ttl has passed.
		requireNoErr(t, b.store.Touch(b.ctx, set, "refreshed", []byte("r1"), shortTTL), "Touch refreshed")
		requireNoErr(t, b.store.Touch(b.ctx, set, "refreshed", []byte("r2"), longTTL), "Touch refreshed again")
		requireNoErr(t, b.store.Touch(b.ctx, set, "gone", []byte("g"), shortTTL), "Touch gone")

		deadline := time.Now().Add(waitTimeout)
		for {
			m, err := b.store.Members(b.ctx, set)
			requireNoErr(t, err, "Members")
			if _, ok := m["gone"]; !ok {
				requireMap(t, m, map[string]string{"stays": "s", "refreshed": "r2"}, "Members after expiry")
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member with ttl %v still present after %v", shortTTL, waitTimeout)
			}
			time.Sleep(pollInterval)
		}
		// An expired member comes back when touched again.
		requireNoErr(t, b.store.Touch(b.ctx, set, "gone", []byte("back"), longTTL), "Touch gone again")
		requireMembers(t, b, set, map[string]string{"stays": "s", "refreshed": "r2", "gone": "back"})
	})

	t.Run("PresenceConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		set := b.key("workers")
		const members = 32
		runConcurrently(t, members, func(i int) error {
			return b.store.Touch(b.ctx, set, fmt.Sprintf("w%d", i), fmt.Appendf(nil, "d%d", i), longTTL)
		})
		want := make(map[string]string, members)
		for i := range members {
			want[fmt.Sprintf("w%d", i)] = fmt.Sprintf("d%d", i)
		}
		requireMembers(t, b, set, want)
	})

	runCounted(t, newStore)
	runAdmit(t, newStore)
	runShared(t, newStore)
	runTally(t, newStore)

	t.Run("CanceledContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		ctx, cancel := context.WithCancel(b.ctx)
		cancel()
		err := b.store.Set(ctx, b.key("k"), []byte("v"), 0)
		requireIs(t, err, context.Canceled, "Set with a canceled context")
	})

	t.Run("Ping", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		requireNoErr(t, b.store.Ping(b.ctx), "Ping")
	})

	t.Run("Close", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		k := b.key("k")
		requireNoErr(t, b.store.Set(b.ctx, k, []byte("v"), 0), "Set")
		requireNoErr(t, b.store.Close(), "Close")
		requireNoErr(t, b.store.Close(), "second Close")

		s, ctx := b.store, b.ctx
		calls := map[string]func() error{
			"Get":     func() error { _, err := s.Get(ctx, k); return err },
			"Set":     func() error { return s.Set(ctx, k, nil, 0) },
			"SetNX":   func() error { _, err := s.SetNX(ctx, k, nil, 0); return err },
			"Delete":  func() error { return s.Delete(ctx, k) },
			"Append":  func() error { _, err := s.Append(ctx, k, nil, 0); return err },
			"Len":     func() error { _, err := s.Len(ctx, k); return err },
			"HSet":    func() error { return s.HSet(ctx, k, "f", nil) },
			"HGet":    func() error { _, err := s.HGet(ctx, k, "f"); return err },
			"HGetAll": func() error { _, err := s.HGetAll(ctx, k); return err },
			"HDel":    func() error { return s.HDel(ctx, k, "f") },
			"HLen":    func() error { _, err := s.HLen(ctx, k); return err },
			"Touch":   func() error { return s.Touch(ctx, k, "m", nil, longTTL) },
			"Members": func() error { _, err := s.Members(ctx, k); return err },
			"Leave":   func() error { return s.Leave(ctx, k, "m") },
			"Ping":    func() error { return s.Ping(ctx) },
		}
		for name, call := range calls {
			if err := call(); !errors.Is(err, statestore.ErrClosed) {
				t.Errorf("%s after Close = %v, want ErrClosed", name, err)
			}
		}
	})
}

// RunRestart checks that state outlives the store: it writes through one
// store from open, closes it, calls restart (which may restart the server
// behind it, or do nothing), and reads everything back through a second
// store from open. Values given a ttl are written with a long one.
func RunRestart(t *testing.T, open NewStoreFunc, restart func(t *testing.T)) {
	t.Helper()
	b := setup(t, open)
	k, buf, h, set := b.key("k"), b.key("buf"), b.key("h"), b.key("workers")
	requireNoErr(t, b.store.Set(b.ctx, k, []byte("value"), longTTL), "Set")
	var want []byte
	for i := range 10 {
		p := fmt.Appendf(nil, "piece %d\x00", i)
		want = append(want, p...)
		_, err := b.store.Append(b.ctx, buf, p, 0)
		requireNoErr(t, err, "Append")
	}
	requireNoErr(t, b.store.HSet(b.ctx, h, "f", []byte("hv")), "HSet")
	requireNoErr(t, b.store.Touch(b.ctx, set, "w1", []byte("d1"), longTTL), "Touch")
	requireNoErr(t, b.store.Close(), "Close")

	restart(t)

	b2 := b
	b2.store = open(t)
	t.Cleanup(func() { _ = b2.store.Close() })
	requireValue(t, b2, k, "value")
	requireValue(t, b2, buf, string(want))
	requireAppend(t, b2, buf, "end", 0, int64(len(want))+3)
	v, err := b2.store.HGet(b2.ctx, h, "f")
	requireNoErr(t, err, "HGet after restart")
	requireEqual(t, v, "hv", "HGet after restart")
	requireMembers(t, b2, set, map[string]string{"w1": "d1"})
}

// runConcurrently runs fn(0) … fn(n-1) in n goroutines released together
// and fails the test with the first error.
func runConcurrently(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make(chan error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			if err := fn(i); err != nil {
				errs <- fmt.Errorf("goroutine %d: %w", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// waitNotFound polls until key reads as ErrNotFound.
func waitNotFound(t *testing.T, b bundle, key string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		_, err := b.store.Get(b.ctx, key)
		if errors.Is(err, statestore.ErrNotFound) {
			return
		}
		requireNoErr(t, err, "Get while waiting for expiry")
		if time.Now().After(deadline) {
			t.Fatalf("key %q still present %v after it should have expired", key, waitTimeout)
		}
		time.Sleep(pollInterval)
	}
}

func requireNoErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func requireIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

func requireEqual(t *testing.T, got []byte, want, what string) {
	t.Helper()
	if string(got) != want {
		t.Fatalf("%s = %s, want %s", what, short(string(got)), short(want))
	}
}

func requireValue(t *testing.T, b bundle, key, want string) {
	t.Helper()
	v, err := b.store.Get(b.ctx, key)
	requireNoErr(t, err, fmt.Sprintf("Get %q", key))
	requireEqual(t, v, want, fmt.Sprintf("Get %q", key))
}

func requireLen(t *testing.T, b bundle, key string, want int64) {
	t.Helper()
	n, err := b.store.Len(b.ctx, key)
	requireNoErr(t, err, fmt.Sprintf("Len %q", key))
	if n != want {
		t.Fatalf("Len %q = %d, want %d", key, n, want)
	}
}

func requireAppend(t *testing.T, b bundle, key, data string, maxLen, wantLen int64) {
	t.Helper()
	n, err := b.store.Append(b.ctx, key, []byte(data), maxLen)
	requireNoErr(t, err, fmt.Sprintf("Append %q to %q", data, key))
	if n != wantLen {
		t.Fatalf("Append %q to %q returned length %d, want %d", data, key, n, wantLen)
	}
}

func requireMembers(t *testing.T, b bundle, set string, want map[string]string) {
	t.Helper()
	m, err := b.store.Members(b.ctx, set)
	requireNoErr(t, err, fmt.Sprintf("Members %q", set))
	requireMap(t, m, want, fmt.Sprintf("Members %q", set))
}

func requireMap(t *testing.T, got map[string][]byte, want map[string]string, what string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s has %d entries, want %d: %q", what, len(got), len(want), got)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || string(g) != w {
			t.Fatalf("%s[%q] = %q (present %v), want %q", what, k, g, ok, w)
		}
	}
}

// short keeps failure messages about large values readable.
func short(s string) string {
	if len(s) > 64 {
		return fmt.Sprintf("%q… (%d bytes)", s[:64], len(s))
	}
	return fmt.Sprintf("%q", s)
}
