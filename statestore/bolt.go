package statestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Bolt layout. Every record key starts with keyPrefix(key), the key's length
// as a uvarint followed by the key itself; that encoding is prefix-free, so a
// prefix scan for one key never runs into another key's records.
//
//	meta      keyPrefix(key)                 -> expiry (int64 unix ns, 0 = none) | length (uint64) | chunks (uint64)
//	chunks    keyPrefix(key) | seq (uint64)  -> the seq'th piece of the value
//	hashes    keyPrefix(key) | field         -> value
//	presence  keyPrefix(set) | member        -> expiry (int64 unix ns) | data
//
// A value is its chunks in seq order, so Append writes one chunk and one meta
// record instead of rewriting the value.
var (
	bucketMeta     = []byte("meta")
	bucketChunks   = []byte("chunks")
	bucketHashes   = []byte("hashes")
	bucketPresence = []byte("presence")
)

const (
	// boltLockTimeout is how long OpenBolt waits for the file lock held by
	// another process before giving up.
	boltLockTimeout = time.Second
	// boltSweepInterval is how often expired values and presence members that
	// nobody read are removed from the file.
	boltSweepInterval = time.Minute
	metaSize          = 24
)

// BoltStore is the Store for the single-process mode (`codexec dev`): an
// embedded bbolt file, so state survives a restart. Every call is one bbolt
// transaction, or part of one shared with the writes made at the same time
// (bolt_group.go); each write is synced to disk before it returns. Expired values read as ErrNotFound and are deleted
// when read and by a background sweep.
type BoltStore struct {
	db     *bolt.DB
	closed atomic.Bool
	stop   chan struct{}
	wg     sync.WaitGroup
	group  boltGroup // writes committed together (bolt_group.go)
}

var _ Store = (*BoltStore)(nil)

// OpenBolt opens (creating if needed, with its directory) the bbolt file at
// path. Only one process can hold the file: if another has it, OpenBolt gives
// up after a second with an error saying the data directory is in use.
func OpenBolt(path string) (*BoltStore, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("statestore: bolt: create data directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: boltLockTimeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return nil, fmt.Errorf("statestore: data directory %s is in use by another codexec process (could not lock %s): %w",
			filepath.Dir(path), path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("statestore: bolt: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketChunks, bucketHashes, bucketPresence} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("statestore: bolt: create buckets in %s: %w", path, err)
	}
	s := &BoltStore{db: db, stop: make(chan struct{})}
	s.wg.Add(1)
	go s.sweepLoop()
	return s, nil
}

// Get implements Store.
func (s *BoltStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []byte
	err := s.viewLive(key, func(tx *bolt.Tx, m meta) error {
		out = make([]byte, 0, m.length)
		p := keyPrefix(key)
		c := tx.Bucket(bucketChunks).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			out = append(out, v...)
		}
		if uint64(len(out)) != m.length {
			return fmt.Errorf("value %q is %d bytes long, its record says %d", key, len(out), m.length)
		}
		return nil
	})
	if err != nil {
		return nil, boltErr("get", err)
	}
	return out, nil
}

// Set implements Store.
func (s *BoltStore) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return boltErr("set", s.update(func(tx *bolt.Tx) error {
		return putValue(tx, key, value, ttl)
	}))
}

// SetNX implements Store.
func (s *BoltStore) SetNX(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	var set bool
	err := s.update(func(tx *bolt.Tx) error {
		set = false
		if m, ok := readMeta(tx, key); ok && !m.expired(time.Now()) {
			return nil
		}
		set = true
		return putValue(tx, key, value, ttl)
	})
	if err != nil {
		return false, boltErr("setnx", err)
	}
	return set, nil
}

// Delete implements Store. Like Redis DEL, it removes whatever the key holds:
// a value, a hash or a presence set.
func (s *BoltStore) Delete(ctx context.Context, keys ...string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	return boltErr("delete", s.update(func(tx *bolt.Tx) error {
		for _, key := range keys {
			if err := deleteValue(tx, key); err != nil {
				return err
			}
			if err := deletePrefix(tx.Bucket(bucketHashes), keyPrefix(key)); err != nil {
				return err
			}
			if err := deletePrefix(tx.Bucket(bucketPresence), keyPrefix(key)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// Append implements Store. It writes data as one new chunk and keeps the
// value's expiry, as Redis APPEND does.
func (s *BoltStore) Append(ctx context.Context, key string, data []byte, maxLen int64) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.update(func(tx *bolt.Tx) error {
		m, ok := readMeta(tx, key)
		if ok && m.expired(time.Now()) {
			if err := deleteValue(tx, key); err != nil {
				return err
			}
			ok = false
		}
		if !ok {
			m = meta{}
		}
		newLen := m.length + uint64(len(data))
		if maxLen > 0 && newLen > uint64(maxLen) {
			return ErrTooLarge
		}
		if len(data) > 0 {
			if err := tx.Bucket(bucketChunks).Put(chunkKey(key, m.chunks), data); err != nil {
				return err
			}
			m.chunks++
		}
		m.length = newLen
		n = int64(newLen)
		return writeMeta(tx, key, m)
	})
	if err != nil {
		return 0, boltErr("append", err)
	}
	return n, nil
}

// Len implements Store.
func (s *BoltStore) Len(ctx context.Context, key string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.viewLive(key, func(_ *bolt.Tx, m meta) error {
		n = int64(m.length)
		return nil
	})
	if err != nil {
		return 0, boltErr("len", err)
	}
	return n, nil
}

// HSet implements Store.
func (s *BoltStore) HSet(ctx context.Context, key, field string, value []byte) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return boltErr("hset", s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketHashes).Put(memberKey(key, field), value)
	}))
}

// HGet implements Store.
func (s *BoltStore) HGet(ctx context.Context, key, field string) ([]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketHashes).Get(memberKey(key, field))
		if v == nil {
			return ErrNotFound
		}
		out = bytes.Clone(v)
		return nil
	})
	if err != nil {
		return nil, boltErr("hget", err)
	}
	return out, nil
}

// HGetAll implements Store.
func (s *BoltStore) HGetAll(ctx context.Context, key string) (map[string][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	err := s.db.View(func(tx *bolt.Tx) error {
		p := keyPrefix(key)
		c := tx.Bucket(bucketHashes).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			out[string(k[len(p):])] = bytes.Clone(v)
		}
		return nil
	})
	if err != nil {
		return nil, boltErr("hgetall", err)
	}
	return out, nil
}

// HDel implements Store.
func (s *BoltStore) HDel(ctx context.Context, key string, fields ...string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(fields) == 0 {
		return nil
	}
	return boltErr("hdel", s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketHashes)
		for _, f := range fields {
			if err := b.Delete(memberKey(key, f)); err != nil {
				return err
			}
		}
		return nil
	}))
}

// HLen implements Store. It counts the fields, so it costs O(fields).
func (s *BoltStore) HLen(ctx context.Context, key string) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error {
		p := keyPrefix(key)
		c := tx.Bucket(bucketHashes).Cursor()
		for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		return 0, boltErr("hlen", err)
	}
	return n, nil
}

// Touch implements Store. ttl must be positive.
func (s *BoltStore) Touch(ctx context.Context, set, member string, data []byte, ttl time.Duration) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if ttl <= 0 {
		return fmt.Errorf("statestore: touch: ttl must be positive, got %v", ttl)
	}
	v := make([]byte, 8+len(data))
	binary.BigEndian.PutUint64(v, uint64(time.Now().Add(ttl).UnixNano()))
	copy(v[8:], data)
	return boltErr("touch", s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPresence).Put(memberKey(set, member), v)
	}))
}

// Members implements Store. Expired members found while reading are then
// deleted in a separate write transaction.
func (s *BoltStore) Members(ctx context.Context, set string) (map[string][]byte, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]byte)
	var expired [][]byte
	now := time.Now()
	err := s.db.View(func(tx *bolt.Tx) error {
		p := keyPrefix(set)
		c := tx.Bucket(bucketPresence).Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			if presenceExpired(v, now) {
				expired = append(expired, bytes.Clone(k))
				continue
			}
			out[string(k[len(p):])] = bytes.Clone(v[8:])
		}
		return nil
	})
	if err != nil {
		return nil, boltErr("members", err)
	}
	if len(expired) > 0 {
		// Best effort: a failure here leaves the members for the sweep.
		_ = s.update(func(tx *bolt.Tx) error {
			return deleteExpiredMembers(tx.Bucket(bucketPresence), expired, time.Now())
		})
	}
	return out, nil
}

// Leave implements Store.
func (s *BoltStore) Leave(ctx context.Context, set, member string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return boltErr("leave", s.update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPresence).Delete(memberKey(set, member))
	}))
}

// Ping implements Store; it reports ErrClosed after Close.
func (s *BoltStore) Ping(ctx context.Context) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	return boltErr("ping", s.db.View(func(*bolt.Tx) error { return nil }))
}

// Close implements Store. It stops the sweep, waits for transactions in
// flight and releases the file lock.
func (s *BoltStore) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(s.stop)
	s.wg.Wait()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("statestore: bolt: close: %w", err)
	}
	return nil
}

// check refuses calls on a closed store or with a finished context. bbolt
// calls cannot be interrupted, so ctx is only looked at here.
func (s *BoltStore) check(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// viewLive runs fn in a read transaction with key's metadata, or returns
// ErrNotFound when key has no value or its value has expired; an expired
// value is then deleted (a read transaction cannot), as dropExpired does.
func (s *BoltStore) viewLive(key string, fn func(tx *bolt.Tx, m meta) error) error {
	var expired bool
	err := s.db.View(func(tx *bolt.Tx) error {
		m, ok := readMeta(tx, key)
		if !ok {
			return ErrNotFound
		}
		if m.expired(time.Now()) {
			expired = true
			return ErrNotFound
		}
		return fn(tx, m)
	})
	if expired {
		s.dropExpired(key)
	}
	return err
}

// dropExpired deletes key's value if it is still expired. It is best effort:
// a failure leaves the value for the sweep.
func (s *BoltStore) dropExpired(key string) {
	_ = s.update(func(tx *bolt.Tx) error {
		if m, ok := readMeta(tx, key); ok && m.expired(time.Now()) {
			return deleteValue(tx, key)
		}
		return nil
	})
}

func (s *BoltStore) sweepLoop() {
	defer s.wg.Done()
	t := time.NewTicker(boltSweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_ = s.sweep()
		}
	}
}

// sweep deletes every expired value and presence member.
func (s *BoltStore) sweep() error {
	return s.update(func(tx *bolt.Tx) error {
		now := time.Now()
		var keys []string
		c := tx.Bucket(bucketMeta).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if decodeMeta(v).expired(now) {
				key, ok := parseKeyPrefix(k)
				if ok {
					keys = append(keys, key)
				}
			}
		}
		for _, key := range keys {
			if err := deleteValue(tx, key); err != nil {
				return err
			}
		}
		var members [][]byte
		c = tx.Bucket(bucketPresence).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if presenceExpired(v, now) {
				members = append(members, bytes.Clone(k))
			}
		}
		return deleteExpiredMembers(tx.Bucket(bucketPresence), members, now)
	})
}

// boltErr passes the package's sentinels through, maps a closed database to
// ErrClosed and prefixes the rest.
func boltErr(op string, err error) error {
	switch {
	case err == nil, errors.Is(err, ErrNotFound), errors.Is(err, ErrTooLarge), errors.Is(err, ErrOverQuota), errors.Is(err, ErrNeedData):
		return err
	case errors.Is(err, berrors.ErrDatabaseNotOpen):
		return ErrClosed
	}
	return fmt.Errorf("statestore: bolt %s: %w", op, err)
}

// meta is the record kept for every value.
type meta struct {
	expiry int64 // unix ns; 0 means none
	length uint64
	chunks uint64
}

func (m meta) expired(now time.Time) bool {
	return m.expiry != 0 && m.expiry <= now.UnixNano()
}

func decodeMeta(v []byte) meta {
	if len(v) < metaSize {
		return meta{}
	}
	return meta{
		expiry: int64(binary.BigEndian.Uint64(v[0:])),
		length: binary.BigEndian.Uint64(v[8:]),
		chunks: binary.BigEndian.Uint64(v[16:]),
	}
}

func readMeta(tx *bolt.Tx, key string) (meta, bool) {
	v := tx.Bucket(bucketMeta).Get(keyPrefix(key))
	if v == nil {
		return meta{}, false
	}
	return decodeMeta(v), true
}

func writeMeta(tx *bolt.Tx, key string, m meta) error {
	v := make([]byte, metaSize)
	binary.BigEndian.PutUint64(v[0:], uint64(m.expiry))
	binary.BigEndian.PutUint64(v[8:], m.length)
	binary.BigEndian.PutUint64(v[16:], m.chunks)
	return tx.Bucket(bucketMeta).Put(keyPrefix(key), v)
}

// putValue replaces key's value with value as a single chunk.
func putValue(tx *bolt.Tx, key string, value []byte, ttl time.Duration) error {
	if err := deleteValue(tx, key); err != nil {
		return err
	}
	m := meta{length: uint64(len(value))}
	if ttl > 0 {
		m.expiry = time.Now().Add(ttl).UnixNano()
	}
	if len(value) > 0 {
		if err := tx.Bucket(bucketChunks).Put(chunkKey(key, 0), value); err != nil {
			return err
		}
		m.chunks = 1
	}
	return writeMeta(tx, key, m)
}

// deleteValue removes key's meta record and chunks, if any.
func deleteValue(tx *bolt.Tx, key string) error {
	m, ok := readMeta(tx, key)
	if !ok {
		return nil
	}
	chunks := tx.Bucket(bucketChunks)
	for seq := range m.chunks {
		if err := chunks.Delete(chunkKey(key, seq)); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMeta).Delete(keyPrefix(key))
}

// deletePrefix removes every record in b whose key starts with p. Keys are
// collected first: deleting under a moving cursor can skip records.
func deletePrefix(b *bolt.Bucket, p []byte) error {
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// deleteExpiredMembers deletes the presence records keys that are still
// expired at now; one touched again since it was seen expired is kept.
func deleteExpiredMembers(b *bolt.Bucket, keys [][]byte, now time.Time) error {
	for _, k := range keys {
		if v := b.Get(k); v != nil && presenceExpired(v, now) {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}

func presenceExpired(v []byte, now time.Time) bool {
	return len(v) < 8 || int64(binary.BigEndian.Uint64(v)) <= now.UnixNano()
}

// keyPrefix encodes key as its length (uvarint) followed by its bytes.
func keyPrefix(key string) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(key)+8)
	b = binary.AppendUvarint(b, uint64(len(key)))
	return append(b, key...)
}

// parseKeyPrefix is the inverse of keyPrefix.
func parseKeyPrefix(b []byte) (string, bool) {
	n, w := binary.Uvarint(b)
	if w <= 0 || uint64(len(b)-w) != n {
		return "", false
	}
	return string(b[w:]), true
}

func chunkKey(key string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(keyPrefix(key), seq)
}

func memberKey(key, member string) []byte {
	return append(keyPrefix(key), member...)
}
