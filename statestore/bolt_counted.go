package statestore

import (
	"bytes"
	"context"
	"strconv"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Counted writes and shared values of BoltStore (see counted.go). Each call
// is one bbolt write transaction (or part of one: bolt_group.go), so the
// write, the quota counter and the reference counts change together. The
// counter is a value like any other, holding a decimal integer as Redis's
// INCRBY keeps it, and the links and refs hashes are hashes under the same
// names as in Redis.

// SetCounted implements Store.
func (s *BoltStore) SetCounted(ctx context.Context, key string, value []byte, q Quota) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	old := int64(-1)
	err := s.update(func(tx *bolt.Tx) error {
		old = -1
		if m, ok := liveMeta(tx, key, time.Now()); ok {
			old = int64(m.length)
		}
		if err := chargeBoth(tx, q, int64(len(value))-max(old, 0)); err != nil {
			return err
		}
		return putValue(tx, key, value, 0)
	})
	if err != nil {
		return 0, boltErr("set counted", err)
	}
	return old, nil
}

// AppendCounted implements Store.
func (s *BoltStore) AppendCounted(ctx context.Context, key string, data []byte, maxLen int64, q Quota) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.update(func(tx *bolt.Tx) error {
		m, ok := liveMeta(tx, key, time.Now())
		if !ok {
			if err := deleteValue(tx, key); err != nil {
				return err
			}
			m = meta{}
		}
		newLen := m.length + uint64(len(data))
		if maxLen > 0 && newLen > uint64(maxLen) {
			return ErrTooLarge
		}
		if err := chargeBoth(tx, q, int64(len(data))); err != nil {
			return err
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
		return 0, boltErr("append counted", err)
	}
	return n, nil
}

// DeleteCounted implements Store.
func (s *BoltStore) DeleteCounted(ctx context.Context, key string, q Quota) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	var n int64
	err := s.update(func(tx *bolt.Tx) error {
		m, ok := liveMeta(tx, key, time.Now())
		if !ok {
			return ErrNotFound
		}
		n = int64(m.length)
		if err := chargeBoth(tx, q, -n); err != nil {
			return err
		}
		return deleteValue(tx, key)
	})
	if err != nil {
		return 0, boltErr("delete counted", err)
	}
	return n, nil
}

// Link implements Store.
func (s *BoltStore) Link(ctx context.Context, l Link, data []byte) (bool, error) {
	if err := s.check(ctx); err != nil {
		return false, err
	}
	var linked bool
	err := s.update(func(tx *bolt.Tx) error {
		linked = false
		hashes := tx.Bucket(bucketHashes)
		if hashes.Get(memberKey(l.Index, l.Field)) != nil {
			return nil
		}
		now := time.Now()
		var count, size int64
		if rec := hashes.Get(memberKey(refsKey(l.Index), l.Value)); rec != nil {
			count, size, _ = parseRefRecord(rec)
		}
		m, exists := liveMeta(tx, l.Value, now)
		if !exists && data == nil {
			return ErrNeedData
		}
		if count == 0 {
			size = int64(len(data))
			if exists {
				size = int64(m.length)
			}
			if err := charge(tx, l.Quota, size); err != nil {
				return err
			}
		}
		if !exists {
			if err := putValue(tx, l.Value, data, l.TTL); err != nil {
				return err
			}
		} else if l.TTL > 0 && m.expiry != 0 && m.expiry < now.Add(l.TTL).UnixNano() {
			m.expiry = now.Add(l.TTL).UnixNano()
			if err := writeMeta(tx, l.Value, m); err != nil {
				return err
			}
		}
		linked = true
		if err := hashes.Put(memberKey(refsKey(l.Index), l.Value), refRecord(count+1, size)); err != nil {
			return err
		}
		if err := hashes.Put(memberKey(linksKey(l.Index), l.Field), []byte(l.Value)); err != nil {
			return err
		}
		return hashes.Put(memberKey(l.Index, l.Field), l.Entry)
	})
	if err != nil {
		return false, boltErr("link", err)
	}
	return linked, nil
}

// Unlink implements Store.
func (s *BoltStore) Unlink(ctx context.Context, index string, q Quota, fields ...string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	if len(fields) == 0 {
		return nil
	}
	return boltErr("unlink", s.update(func(tx *bolt.Tx) error {
		for _, f := range fields {
			if err := unlinkOne(tx, index, q, f); err != nil {
				return err
			}
		}
		return nil
	}))
}

func unlinkOne(tx *bolt.Tx, index string, q Quota, field string) error {
	hashes := tx.Bucket(bucketHashes)
	if err := hashes.Delete(memberKey(index, field)); err != nil {
		return err
	}
	lk := memberKey(linksKey(index), field)
	vk := hashes.Get(lk)
	if vk == nil {
		return nil
	}
	value := string(vk)
	if err := hashes.Delete(lk); err != nil {
		return err
	}
	rk := memberKey(refsKey(index), value)
	rec := hashes.Get(rk)
	if rec == nil {
		return nil
	}
	count, size, _ := parseRefRecord(rec)
	if count > 1 {
		return hashes.Put(rk, refRecord(count-1, size))
	}
	if err := hashes.Delete(rk); err != nil {
		return err
	}
	if err := deleteValue(tx, value); err != nil {
		return err
	}
	return charge(tx, q, -size)
}

// liveMeta is key's metadata, if it has a value that has not expired.
func liveMeta(tx *bolt.Tx, key string, now time.Time) (meta, bool) {
	m, ok := readMeta(tx, key)
	if !ok || m.expired(now) {
		return meta{}, false
	}
	return m, true
}

// chargeBoth charges delta to q and to q.Outer, when set: both or neither.
// The transaction is rolled back on error, so a refusal by the outer
// counter undoes the inner one's charge.
func chargeBoth(tx *bolt.Tx, q Quota, delta int64) error {
	if err := charge(tx, q, delta); err != nil {
		return err
	}
	if q.Outer == nil {
		return nil
	}
	return charge(tx, Quota{Key: q.Outer.Key, Limit: q.Outer.Limit}, delta)
}

// charge adds delta to q's counter, refusing growth past q.Limit with a
// *QuotaError and never taking the counter below zero.
func charge(tx *bolt.Tx, q Quota, delta int64) error {
	used, err := readCounter(tx, q.Key)
	if err != nil {
		return err
	}
	if delta > 0 && q.Limit > 0 && used+delta > q.Limit {
		return &QuotaError{Key: q.Key, Used: used, Adding: delta, Limit: q.Limit}
	}
	if delta == 0 {
		return nil
	}
	return putValue(tx, q.Key, strconv.AppendInt(nil, max(used+delta, 0), 10), 0)
}

// readCounter reads the integer value at key; a missing value is 0.
func readCounter(tx *bolt.Tx, key string) (int64, error) {
	if _, ok := liveMeta(tx, key, time.Now()); !ok {
		return 0, nil
	}
	var v []byte
	p := keyPrefix(key)
	c := tx.Bucket(bucketChunks).Cursor()
	for k, chunk := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, chunk = c.Next() {
		v = append(v, chunk...)
	}
	return strconv.ParseInt(string(v), 10, 64)
}
