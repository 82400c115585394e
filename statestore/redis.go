package statestore

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/append.lua
	appendSource string
	//go:embed lua/touch.lua
	touchSource string
	//go:embed lua/members.lua
	membersSource string
	//go:embed lua/counted.lua
	countedSource string
	//go:embed lua/link.lua
	linkSource string
	//go:embed lua/unlink.lua
	unlinkSource string

	appendScript  = redis.NewScript(appendSource)
	touchScript   = redis.NewScript(touchSource)
	membersScript = redis.NewScript(membersSource)
	countedScript = redis.NewScript(countedSource)
	linkScript    = redis.NewScript(linkSource)
	unlinkScript  = redis.NewScript(unlinkSource)
)

// RedisOptions configures NewRedis. Exactly one of URL and Client is needed;
// Client wins when both are set.
type RedisOptions struct {
	// URL is a redis:// or rediss:// URL as accepted by redis.ParseURL, e.g.
	// "redis://127.0.0.1:6379/0". The store owns the client it builds from it
	// and closes it in Close. With SentinelAddrs, its host is not used: the
	// primary's address comes from the sentinels, and the URL gives only the
	// credentials, database and TLS setting for the primary.
	URL string
	// SentinelAddrs, when set, are the host:port of Redis Sentinels that
	// monitor MasterName: the store asks them for the primary and follows a
	// failover by itself (go-redis's failover client).
	SentinelAddrs []string
	// MasterName is the name the sentinels monitor the primary under.
	MasterName string
	// WaitReplicas, when positive, makes every write of lasting state (Set,
	// SetNX, Delete, Append, HSet, HDel, the counted writes, Link and
	// Unlink: code files, runs, settings) wait
	// until that many replicas have it (Redis WAIT) before it returns, so
	// that a failover cannot lose a write that was acknowledged. A write
	// that fewer replicas confirm within WaitTimeout returns an error (it is
	// on the primary, possibly not on a replica). Presence (Touch, Leave) never
	// waits: it is renewed every few seconds anyway.
	WaitReplicas int
	// WaitTimeout bounds WAIT; default DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Client, when not nil, is used instead of URL. The caller owns it: Close
	// stops the store but leaves Client open.
	Client *redis.Client
}

// DefaultWaitTimeout is RedisOptions.WaitTimeout's default.
const DefaultWaitTimeout = 2 * time.Second

// ErrNotReplicated wraps the error of a write that fewer replicas than
// RedisOptions.WaitReplicas confirmed in time.
var ErrNotReplicated = errors.New("statestore: write not confirmed by enough replicas")

// RedisStore is the Store for clusters, on a single Redis server (or a
// Sentinel-managed primary). It is not written for Redis Cluster: a presence
// set spans two keys that are not hash-tagged into one slot. It needs Redis 5
// or later, whose scripts may write after reading the clock (TIME).
type RedisStore struct {
	client      *redis.Client
	ownClient   bool
	waitN       int
	waitTimeout time.Duration
	closed      atomic.Bool
}

var _ Store = (*RedisStore)(nil)

// NewRedis connects to Redis and pings it, so an unreachable server is
// reported here rather than on first use.
func NewRedis(ctx context.Context, opts RedisOptions) (*RedisStore, error) {
	if opts.WaitReplicas < 0 {
		return nil, fmt.Errorf("statestore: redis: WaitReplicas %d is negative", opts.WaitReplicas)
	}
	s := &RedisStore{client: opts.Client, waitN: opts.WaitReplicas, waitTimeout: opts.WaitTimeout}
	if s.waitTimeout <= 0 {
		s.waitTimeout = DefaultWaitTimeout
	}
	if s.client == nil {
		c, err := newRedisClient(opts)
		if err != nil {
			return nil, err
		}
		s.client, s.ownClient = c, true
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		if s.ownClient {
			_ = s.client.Close()
		}
		return nil, fmt.Errorf("statestore: redis: ping %s: %w", s.describe(opts), err)
	}
	return s, nil
}

// newRedisClient builds the client of opts.URL, through the sentinels when
// opts.SentinelAddrs is set.
func newRedisClient(opts RedisOptions) (*redis.Client, error) {
	if opts.URL == "" {
		return nil, errors.New("statestore: redis: neither URL nor Client is set")
	}
	o, err := redis.ParseURL(opts.URL)
	if err != nil {
		return nil, fmt.Errorf("statestore: redis: parse URL: %w", err)
	}
	if len(opts.SentinelAddrs) == 0 {
		return redis.NewClient(o), nil
	}
	if opts.MasterName == "" {
		return nil, errors.New("statestore: redis: sentinels given without a master name")
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:      opts.MasterName,
		SentinelAddrs:   opts.SentinelAddrs,
		Username:        o.Username,
		Password:        o.Password,
		DB:              o.DB,
		TLSConfig:       o.TLSConfig,
		Protocol:        o.Protocol,
		MaxRetries:      o.MaxRetries,
		MinRetryBackoff: o.MinRetryBackoff,
		MaxRetryBackoff: o.MaxRetryBackoff,
		DialTimeout:     o.DialTimeout,
		ReadTimeout:     o.ReadTimeout,
		WriteTimeout:    o.WriteTimeout,
		PoolSize:        o.PoolSize,
	}), nil
}

// redisWriter is what write hands its fn: the client, or one connection of it.
type redisWriter interface {
	redis.Cmdable
	Process(ctx context.Context, cmd redis.Cmder) error
}

// do sends one command given as arguments, as Client.Do does.
func do(ctx context.Context, c redisWriter, args ...any) error {
	cmd := redis.NewCmd(ctx, args...)
	_ = c.Process(ctx, cmd)
	return cmd.Err()
}

// describe names the server NewRedis talks to, for its errors.
func (s *RedisStore) describe(opts RedisOptions) string {
	if len(opts.SentinelAddrs) > 0 && opts.Client == nil {
		return fmt.Sprintf("primary %q of sentinels %s", opts.MasterName, strings.Join(opts.SentinelAddrs, ","))
	}
	return s.client.Options().Addr
}

// write runs fn, which sends writes of lasting state, and with WaitReplicas
// set then waits until that many replicas have them. WAIT counts the writes
// of its own connection, so fn and WAIT share one connection of the pool.
func (s *RedisStore) write(ctx context.Context, fn func(redisWriter) error) error {
	if s.waitN == 0 {
		return fn(s.client)
	}
	conn := s.client.Conn()
	defer conn.Close()
	if err := fn(conn); err != nil {
		return err
	}
	n, err := conn.Wait(ctx, s.waitN, s.waitTimeout).Result()
	if err != nil {
		return fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	}
	if n < int64(s.waitN) {
		return fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, n, s.waitN, s.waitTimeout)
	}
	return nil
}

// Get implements Store.
func (s *RedisStore) Get(ctx context.Context, key string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	v, err := s.client.Get(ctx, key).Bytes()
	if err != nil {
		return nil, s.wrap("get", err)
	}
	return v, nil
}

// Set implements Store. A ttl is sent as PX, rounded up to whole milliseconds.
func (s *RedisStore) Set(ctx context.Context, key string, value []byte, ttl time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	args := []any{"SET", key, value}
	if ttl > 0 {
		args = append(args, "PX", ttlMillis(ttl))
	}
	return s.wrap("set", s.write(ctx, func(c redisWriter) error { return do(ctx, c, args...) }))
}

// SetNX implements Store.
func (s *RedisStore) SetNX(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	args := []any{"SET", key, value, "NX"}
	if ttl > 0 {
		args = append(args, "PX", ttlMillis(ttl))
	}
	set := true
	err := s.write(ctx, func(c redisWriter) error {
		err := do(ctx, c, args...)
		if errors.Is(err, redis.Nil) {
			set = false
			return nil
		}
		return err
	})
	if err == nil {
		return set, nil
	}
	if err != nil {
		return false, s.wrap("setnx", err)
	}
	return true, nil
}

// Delete implements Store. It also removes the presence set named by each
// key, so Delete clears a key whatever kind of value it holds.
func (s *RedisStore) Delete(ctx context.Context, keys ...string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(keys) == 0 {
		return nil
	}
	all := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		all = append(all, k, presenceDataKey(k))
	}
	return s.wrap("delete", s.write(ctx, func(c redisWriter) error { return c.Del(ctx, all...).Err() }))
}

// Append implements Store with a Lua script (lua/append.lua), so the maxLen
// check and the APPEND are one atomic step.
func (s *RedisStore) Append(ctx context.Context, key string, data []byte, maxLen int64) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	var n int64
	err := s.write(ctx, func(c redisWriter) error {
		var err error
		n, err = appendScript.Run(ctx, c, []string{key}, data, maxLen).Int64()
		return err
	})
	if err != nil {
		return 0, s.wrap("append", err)
	}
	if n < 0 {
		return 0, ErrTooLarge
	}
	return n, nil
}

// Len implements Store. EXISTS and STRLEN run in one MULTI, so a missing key
// is told from an empty value.
func (s *RedisStore) Len(ctx context.Context, key string) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	var exists *redis.IntCmd
	var n *redis.IntCmd
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, key)
		n = p.StrLen(ctx, key)
		return nil
	})
	if err != nil {
		return 0, s.wrap("len", err)
	}
	if exists.Val() == 0 {
		return 0, ErrNotFound
	}
	return n.Val(), nil
}

// HSet implements Store.
func (s *RedisStore) HSet(ctx context.Context, key, field string, value []byte) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.wrap("hset", s.write(ctx, func(c redisWriter) error { return c.HSet(ctx, key, field, value).Err() }))
}

// HGet implements Store.
func (s *RedisStore) HGet(ctx context.Context, key, field string) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	v, err := s.client.HGet(ctx, key, field).Bytes()
	if err != nil {
		return nil, s.wrap("hget", err)
	}
	return v, nil
}

// HGetAll implements Store.
func (s *RedisStore) HGetAll(ctx context.Context, key string) (map[string][]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	m, err := s.client.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, s.wrap("hgetall", err)
	}
	out := make(map[string][]byte, len(m))
	for f, v := range m {
		out[f] = []byte(v)
	}
	return out, nil
}

// HDel implements Store.
func (s *RedisStore) HDel(ctx context.Context, key string, fields ...string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(fields) == 0 {
		return nil
	}
	return s.wrap("hdel", s.write(ctx, func(c redisWriter) error { return c.HDel(ctx, key, fields...).Err() }))
}

// HLen implements Store.
func (s *RedisStore) HLen(ctx context.Context, key string) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.client.HLen(ctx, key).Result()
	if err != nil {
		return 0, s.wrap("hlen", err)
	}
	return n, nil
}

// Touch implements Store with a Lua script (lua/touch.lua) that updates the
// sorted set of expiries and the hash of data together. Expiry is measured
// by the Redis server's clock. ttl must be positive.
func (s *RedisStore) Touch(ctx context.Context, set, member string, data []byte, ttl time.Duration) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if ttl <= 0 {
		return fmt.Errorf("statestore: touch: ttl must be positive, got %v", ttl)
	}
	err := touchScript.Run(ctx, s.client, []string{set, presenceDataKey(set)}, member, data, ttlMillis(ttl)).Err()
	return s.wrap("touch", err)
}

// Members implements Store with a Lua script (lua/members.lua) that prunes
// expired members and returns the live ones.
func (s *RedisStore) Members(ctx context.Context, set string) (map[string][]byte, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	flat, err := membersScript.Run(ctx, s.client, []string{set, presenceDataKey(set)}).StringSlice()
	if err != nil {
		return nil, s.wrap("members", err)
	}
	out := make(map[string][]byte, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		out[flat[i]] = []byte(flat[i+1])
	}
	return out, nil
}

// Leave implements Store.
func (s *RedisStore) Leave(ctx context.Context, set, member string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, set, member)
		p.HDel(ctx, presenceDataKey(set), member)
		return nil
	})
	return s.wrap("leave", err)
}

// SetCounted implements Store with a Lua script (lua/counted.lua).
func (s *RedisStore) SetCounted(ctx context.Context, key string, value []byte, q Quota) (int64, error) {
	return s.counted(ctx, "set", key, value, 0, q)
}

// AppendCounted implements Store with a Lua script (lua/counted.lua).
func (s *RedisStore) AppendCounted(ctx context.Context, key string, data []byte, maxLen int64, q Quota) (int64, error) {
	return s.counted(ctx, "append", key, data, maxLen, q)
}

// DeleteCounted implements Store with a Lua script (lua/counted.lua).
func (s *RedisStore) DeleteCounted(ctx context.Context, key string, q Quota) (int64, error) {
	return s.counted(ctx, "delete", key, nil, 0, q)
}

func (s *RedisStore) counted(ctx context.Context, op, key string, data []byte, maxLen int64, q Quota) (int64, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	if data == nil {
		data = []byte{}
	}
	var r []int64
	err := s.write(ctx, func(c redisWriter) error {
		var err error
		keys, args := []string{key, q.Key}, []any{op, data, q.Limit, maxLen}
		if q.Outer != nil {
			keys, args = append(keys, q.Outer.Key), append(args, q.Outer.Limit)
		}
		r, err = countedScript.Run(ctx, c, keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		return 0, s.wrap(op+" counted", err)
	}
	switch {
	case len(r) >= 2 && r[0] == 0:
		return r[1], nil
	case len(r) >= 1 && r[0] == -1:
		return 0, ErrTooLarge
	case len(r) >= 3 && r[0] == -2:
		return 0, &QuotaError{Key: q.Key, Used: r[1], Adding: r[2], Limit: q.Limit}
	case len(r) >= 3 && r[0] == -4 && q.Outer != nil:
		return 0, &QuotaError{Key: q.Outer.Key, Used: r[1], Adding: r[2], Limit: q.Outer.Limit}
	case len(r) >= 1 && r[0] == -3:
		return 0, ErrNotFound
	}
	return 0, fmt.Errorf("statestore: redis %s counted: unexpected reply %v", op, r)
}

// Link implements Store with a Lua script (lua/link.lua). The data is sent
// only when given, so linking to an existing value costs the entry only.
func (s *RedisStore) Link(ctx context.Context, l Link, data []byte) (bool, error) {
	if s.closed.Load() {
		return false, ErrClosed
	}
	given := "1"
	if data == nil {
		given, data = "0", []byte{}
	}
	var ttl int64
	if l.TTL > 0 {
		ttl = ttlMillis(l.TTL)
	}
	keys := []string{l.Index, linksKey(l.Index), refsKey(l.Index), l.Value, l.Quota.Key}
	var r []int64
	err := s.write(ctx, func(c redisWriter) error {
		var err error
		r, err = linkScript.Run(ctx, c, keys, l.Field, l.Entry, given, data, ttl, l.Quota.Limit).Int64Slice()
		return err
	})
	if err != nil {
		return false, s.wrap("link", err)
	}
	switch {
	case len(r) >= 1 && r[0] == 1:
		return true, nil
	case len(r) >= 1 && r[0] == 0:
		return false, nil
	case len(r) >= 1 && r[0] == -1:
		return false, ErrNeedData
	case len(r) >= 3 && r[0] == -2:
		return false, &QuotaError{Key: l.Quota.Key, Used: r[1], Adding: r[2], Limit: l.Quota.Limit}
	}
	return false, fmt.Errorf("statestore: redis link: unexpected reply %v", r)
}

// Unlink implements Store with a Lua script (lua/unlink.lua).
func (s *RedisStore) Unlink(ctx context.Context, index string, q Quota, fields ...string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if len(fields) == 0 {
		return nil
	}
	args := make([]any, len(fields))
	for i, f := range fields {
		args[i] = f
	}
	keys := []string{index, linksKey(index), refsKey(index), q.Key}
	return s.wrap("unlink", s.write(ctx, func(c redisWriter) error { return unlinkScript.Run(ctx, c, keys, args...).Err() }))
}

// Ping implements Store.
func (s *RedisStore) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.wrap("ping", s.client.Ping(ctx).Err())
}

// Close implements Store. It closes the client only when NewRedis built it
// from RedisOptions.URL.
func (s *RedisStore) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	if s.ownClient {
		if err := s.client.Close(); err != nil {
			return fmt.Errorf("statestore: redis: close: %w", err)
		}
	}
	return nil
}

// wrap maps go-redis errors onto the package's sentinels and prefixes the rest.
func (s *RedisStore) wrap(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redis.Nil):
		return ErrNotFound
	case errors.Is(err, redis.ErrClosed):
		return ErrClosed
	}
	return fmt.Errorf("statestore: redis %s: %w", op, err)
}

// ttlMillis converts a positive ttl to whole milliseconds, rounding up so a
// sub-millisecond ttl still expires rather than meaning "forever".
func ttlMillis(ttl time.Duration) int64 {
	return int64((ttl + time.Millisecond - 1) / time.Millisecond)
}
