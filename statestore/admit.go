package statestore

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// Admission is the answer of Admit.
type Admission struct {
	// Admitted says the member is now in the set.
	Admitted bool
	// Count is the number of live members: after the member was added, or,
	// refused, the number that filled the set.
	Count int
	// Retry is, when refused, how long until the earliest live member
	// expires: the latest time a slot frees by itself.
	Retry time.Duration
}

// Admitter is implemented by every Store: the slots and rate windows of
// quotas. Admit records member in the presence set set for ttl (as Touch)
// only when the set has fewer than limit live members, or member is one of
// them (then its ttl is renewed); limit <= 0 admits always. The check and
// the write are one atomic step across every client of the store. A member
// leaves by Leave, or by expiring: a holder that dies does not hold its slot
// past its ttl.
type Admitter interface {
	Admit(ctx context.Context, set, member string, data []byte, limit int, ttl time.Duration) (Admission, error)
}

var (
	//go:embed lua/admit.lua
	admitSource string
	admitScript = redis.NewScript(admitSource)
)

// Admit implements Admitter with a Lua script (lua/admit.lua), by the Redis
// server's clock.
func (s *RedisStore) Admit(ctx context.Context, set, member string, data []byte, limit int, ttl time.Duration) (Admission, error) {
	if s.closed.Load() {
		return Admission{}, ErrClosed
	}
	if ttl <= 0 {
		return Admission{}, fmt.Errorf("statestore: admit: ttl must be positive, got %v", ttl)
	}
	if data == nil {
		data = []byte{}
	}
	var r []int64
	err := s.write(ctx, func(c redisWriter) error {
		var err error
		r, err = admitScript.Run(ctx, c, []string{set, presenceDataKey(set)}, member, data, limit, ttlMillis(ttl)).Int64Slice()
		return err
	})
	if err != nil {
		return Admission{}, s.wrap("admit", err)
	}
	if len(r) < 2 || (r[0] == 0 && len(r) < 3) {
		return Admission{}, fmt.Errorf("statestore: admit: unexpected reply %v", r)
	}
	a := Admission{Admitted: r[0] == 1, Count: int(r[1])}
	if !a.Admitted {
		a.Retry = time.Duration(r[2]) * time.Millisecond
	}
	return a, nil
}

// Admit implements Admitter in one write transaction.
func (s *BoltStore) Admit(ctx context.Context, set, member string, data []byte, limit int, ttl time.Duration) (Admission, error) {
	if err := s.check(ctx); err != nil {
		return Admission{}, err
	}
	if ttl <= 0 {
		return Admission{}, fmt.Errorf("statestore: admit: ttl must be positive, got %v", ttl)
	}
	var a Admission
	err := s.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketPresence)
		now := time.Now()
		p := keyPrefix(set)
		mk := memberKey(set, member)
		var expired [][]byte
		var earliest int64
		present := false
		n := 0
		c := b.Cursor()
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			if presenceExpired(v, now) {
				expired = append(expired, bytes.Clone(k))
				continue
			}
			if e := int64(binary.BigEndian.Uint64(v)); earliest == 0 || e < earliest {
				earliest = e
			}
			present = present || bytes.Equal(k, mk)
			n++
		}
		for _, k := range expired {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		if limit > 0 && n >= limit && !present {
			a = Admission{Count: n, Retry: time.Duration(earliest - now.UnixNano())}
			return nil
		}
		if !present {
			n++
		}
		v := make([]byte, 8+len(data))
		binary.BigEndian.PutUint64(v, uint64(now.Add(ttl).UnixNano()))
		copy(v[8:], data)
		a = Admission{Admitted: true, Count: n}
		return b.Put(mk, v)
	})
	return a, boltErr("admit", err)
}
