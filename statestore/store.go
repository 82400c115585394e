// Package statestore is codexec's shared state: which workers are alive and
// what they hold, per-session settings, code files and the code of recent
// runs (their layout is codefiles.CodeStore's; their keys are built here).
//
// Store is one small interface with two implementations: Redis (go-redis) for
// clusters, and an embedded bbolt file for `codexec dev`, whose state survives
// a restart because it lives under the data directory. Both pass the same
// conformance suite (storetest). Keys are built by the helpers in keys.go,
// never by hand at call sites.
//
// Counted writes (SetCounted, AppendCounted, DeleteCounted) charge a byte
// counter, a Quota, in the same atomic step as the write, and refuse to take
// it past its limit, and a second, outer counter with it when the Quota
// has one (a tenant's total over its sessions); shared values (Link,
// Unlink) are stored once however many entries of an index refer to them,
// and deleted with their last reference. See counted.go. A tally (Tally,
// tally.go) is a hash of integers whose sum the store keeps beside it.
//
// # Redis layout
//
// A value or hash lives under its own key as a Redis string or hash. A
// presence set S is two keys: the sorted set S (member → expiry in unix
// milliseconds, by the Redis server's clock) and the hash S:data (member →
// data); both expire with their longest-lived member, and Members prunes
// expired members from both. Append, Touch and Members are Lua scripts
// (lua/*.lua, each headed by its KEYS and ARGV), and so are the counted
// writes, Link and Unlink. Delete(S) removes S and S:data. Use each key for one kind of value only, and do not name a key
// S:data when S is a presence set. The two keys of a presence set are not
// hash-tagged, so RedisStore targets a single Redis server, not Redis Cluster.
//
// # Bolt layout
//
// BoltStore keeps values, hashes and presence sets in separate buckets (see
// bolt.go); a value is stored as chunks plus a length record, so Append
// writes only the new bytes. Expired values and members read as absent and
// are deleted when read or by a sweep once a minute. The file is locked: a
// second process opening it gets an "in use" error after a second.
package statestore

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned when a key, field or member does not exist or has expired.
var ErrNotFound = errors.New("statestore: not found")

// ErrTooLarge is returned by Append when the value would exceed its maximum length.
var ErrTooLarge = errors.New("statestore: value would exceed its size limit")

// ErrClosed is returned by every call on a closed store.
var ErrClosed = errors.New("statestore: closed")

// Store is the state interface shared by frontends and workers.
// Every method is safe for concurrent use.
type Store interface {
	// Get returns the value of key, or ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)
	// Set stores value under key. ttl <= 0 means no expiry.
	Set(ctx context.Context, key string, value []byte, ttl time.Duration) error
	// SetNX stores value only when key does not exist; it reports whether it did.
	SetNX(ctx context.Context, key string, value []byte, ttl time.Duration) (bool, error)
	// Delete removes keys; missing keys are not an error.
	Delete(ctx context.Context, keys ...string) error
	// Append adds data to the end of key's value (creating it) and returns the
	// new length. It costs in proportion to len(data), never a rewrite of the
	// whole value. If maxLen > 0 and the result would exceed it, nothing is
	// written and ErrTooLarge is returned. Concurrent appends never lose data.
	Append(ctx context.Context, key string, data []byte, maxLen int64) (int64, error)
	// Len returns the length of key's value, or ErrNotFound.
	Len(ctx context.Context, key string) (int64, error)

	// HSet sets field in the hash at key.
	HSet(ctx context.Context, key, field string, value []byte) error
	// HGet returns one field of the hash at key, or ErrNotFound.
	HGet(ctx context.Context, key, field string) ([]byte, error)
	// HGetAll returns every field of the hash at key (empty map when absent).
	HGetAll(ctx context.Context, key string) (map[string][]byte, error)
	// HDel removes fields from the hash at key.
	HDel(ctx context.Context, key string, fields ...string) error
	// HLen returns the number of fields in the hash at key.
	HLen(ctx context.Context, key string) (int64, error)

	// Touch records member as present in set with data for ttl from now,
	// replacing any earlier data. Presence expires unless touched again.
	Touch(ctx context.Context, set, member string, data []byte, ttl time.Duration) error
	// Members returns the live members of set and their data; expired members
	// are left out (and may be pruned).
	Members(ctx context.Context, set string) (map[string][]byte, error)
	// Leave removes member from set at once.
	Leave(ctx context.Context, set, member string) error

	// SetCounted replaces key's value (without expiry) and charges the
	// change in its length to q, in one atomic step; see Quota. It returns
	// the length the value had, or -1 when there was none.
	SetCounted(ctx context.Context, key string, value []byte, q Quota) (int64, error)
	// AppendCounted is Append that also charges len(data) to q: maxLen is
	// checked first (ErrTooLarge), then q (*QuotaError).
	AppendCounted(ctx context.Context, key string, data []byte, maxLen int64, q Quota) (int64, error)
	// DeleteCounted deletes key's value and releases its length from q. It
	// returns that length, or ErrNotFound.
	DeleteCounted(ctx context.Context, key string, q Quota) (int64, error)

	// Link adds l.Field to the index l.Index with one reference to the
	// shared value l.Value (see counted.go). When the value does not exist
	// and no entry refers to it, it is created from data, charged to
	// l.Quota; data may be nil when the caller expects the value to exist:
	// Link then returns ErrNeedData if it does not. It reports false, and
	// changes nothing, when l.Field is already in the index.
	Link(ctx context.Context, l Link, data []byte) (bool, error)
	// Unlink removes fields from index and their references, deleting each
	// shared value with its last reference and releasing its length from q.
	// Missing fields are not an error.
	Unlink(ctx context.Context, index string, q Quota, fields ...string) error

	// Ping checks the store is reachable.
	Ping(ctx context.Context) error
	// Close releases the store; calling it twice is harmless.
	Close() error
}
