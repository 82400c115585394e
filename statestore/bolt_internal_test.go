package statestore

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTestBolt(t *testing.T) *BoltStore {
	t.Helper()
	s, err := OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatalf("OpenBolt: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// count returns how many records in bucket start with keyPrefix(key).
func count(t *testing.T, s *BoltStore, bucket []byte, key string) int {
	t.Helper()
	var n int
	err := s.db.View(func(tx *bolt.Tx) error {
		p := keyPrefix(key)
		c := tx.Bucket(bucket).Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBoltAppendWritesOneChunk(t *testing.T) {
	t.Parallel()
	s := openTestBolt(t)
	ctx := t.Context()
	if err := s.Set(ctx, "k", []byte("start"), 0); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := s.Append(ctx, "k", []byte("+"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, s, bucketChunks, "k"); n != 6 {
		t.Fatalf("%d chunks after Set and 5 appends, want 6", n)
	}
	// "k" and "k\x00..." must not share records.
	if err := s.Set(ctx, "k\x00", []byte("other"), 0); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, bucketChunks, "k"); n != 6 {
		t.Fatalf("%d chunks for k after writing k\\x00, want 6", n)
	}
	if err := s.Set(ctx, "k", []byte("replaced"), 0); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, bucketChunks, "k"); n != 1 {
		t.Fatalf("%d chunks after Set over an appended value, want 1", n)
	}
}

func TestBoltExpiredValuesAreDeleted(t *testing.T) {
	t.Parallel()
	s := openTestBolt(t)
	ctx := t.Context()
	// Values with a 1ns ttl have expired by the time anything reads them.
	for _, k := range []string{"read", "unread"} {
		if err := s.db.Update(func(tx *bolt.Tx) error { return putValue(tx, k, []byte("v"), time.Nanosecond) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		v := make([]byte, 8)
		return tx.Bucket(bucketPresence).Put(memberKey("set", "m"), v) // expiry 0: long gone
	}); err != nil {
		t.Fatal(err)
	}

	// Reading deletes lazily.
	if _, err := s.Get(ctx, "read"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an expired value = %v, want ErrNotFound", err)
	}
	if n := count(t, s, bucketMeta, "read") + count(t, s, bucketChunks, "read"); n != 0 {
		t.Fatalf("%d records left for an expired value after Get, want 0", n)
	}
	// The sweep gets the rest.
	if n := count(t, s, bucketMeta, "unread"); n != 1 {
		t.Fatalf("%d meta records for unread before the sweep, want 1", n)
	}
	if err := s.sweep(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, s, bucketMeta, "unread") + count(t, s, bucketChunks, "unread") + count(t, s, bucketPresence, "set"); n != 0 {
		t.Fatalf("%d expired records left after the sweep, want 0", n)
	}
}

func TestKeyPrefixRoundTrip(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "a", "a\x00b", string(bytes.Repeat([]byte("x"), 300))} {
		got, ok := parseKeyPrefix(keyPrefix(k))
		if !ok || got != k {
			t.Errorf("parseKeyPrefix(keyPrefix(%q)) = %q, %v", k, got, ok)
		}
	}
}
