package statestore

import (
	"context"
	_ "embed"
	"strconv"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"
)

// Tallier is implemented by every Store: tallies, hashes of non-negative
// integers (field → n) whose sum the store keeps beside them, changed in
// the same atomic step as the field, so that any number of writers on any
// number of processes keep it exact. A tally at key is the hash key (read
// it with HGet and HGetAll) and the integer value TallySumKey(key) (read it
// with TallySum). Change a tally's fields with Tally only.
type Tallier interface {
	// Tally sets field of the tally at key to n (n <= 0 removes the field)
	// and returns the tally's sum after.
	Tally(ctx context.Context, key, field string, n int64) (int64, error)
}

// TallySumKey is the key of the sum of the tally at key.
func TallySumKey(key string) string { return key + ":sum" }

// TallySum returns the sum of the tally at key (0 when it has none).
func TallySum(ctx context.Context, st Store, key string) (int64, error) {
	return Usage(ctx, st, Quota{Key: TallySumKey(key)})
}

var (
	//go:embed lua/tally.lua
	tallySource string
	tallyScript = redis.NewScript(tallySource)
)

// Tally implements Tallier with a Lua script (lua/tally.lua).
func (s *RedisStore) Tally(ctx context.Context, key, field string, n int64) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	var sum int64
	err := s.write(ctx, func(c redisWriter) error {
		var err error
		sum, err = tallyScript.Run(ctx, c, []string{key, TallySumKey(key)}, field, max(n, 0)).Int64()
		return err
	})
	return sum, s.wrap("tally", err)
}

// Tally implements Tallier in one write transaction.
func (s *BoltStore) Tally(ctx context.Context, key, field string, n int64) (int64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	n = max(n, 0)
	var sum int64
	err := s.update(func(tx *bolt.Tx) error {
		hashes := tx.Bucket(bucketHashes)
		mk := memberKey(key, field)
		var old int64
		if v := hashes.Get(mk); v != nil {
			old, _ = strconv.ParseInt(string(v), 10, 64)
		}
		var err error
		if n > 0 {
			err = hashes.Put(mk, strconv.AppendInt(nil, n, 10))
		} else {
			err = hashes.Delete(mk)
		}
		if err != nil {
			return err
		}
		if sum, err = readCounter(tx, TallySumKey(key)); err != nil || n == old {
			return err
		}
		sum = max(sum+n-old, 0)
		return putValue(tx, TallySumKey(key), strconv.AppendInt(nil, sum, 10), 0)
	})
	if err != nil {
		return 0, boltErr("tally", err)
	}
	return sum, nil
}
