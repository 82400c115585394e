package statestore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Counted writes and shared values.
//
// A Quota is a byte counter: the decimal integer value at Quota.Key, which
// every counted write charges or releases in the same atomic step as the
// write itself, so concurrent writers on any number of processes keep it
// exact. SetCounted, AppendCounted and DeleteCounted are Set, Append and
// Delete that keep the counter; Link and Unlink keep it for shared values.
//
// A shared value is a value stored once however many entries refer to it.
// Its entries live in an index hash (read it with HGet and HGetAll like any
// hash); beside the index the store keeps which value each entry refers to
// (hash index:links, field → value key) and how many entries refer to each
// value (hash index:refs, value key → "count size"). Link adds an entry and
// a reference, creating the value only when no entry referred to it; Unlink
// removes entries and deletes each value with its last reference. A value is
// charged to the quota once, when it is created, and released when it is
// deleted. Remove entries with Unlink only: HDel or Delete on the index
// would leave their values referenced.
//
// The keys of a quota and of a shared value's index, links, refs and value
// are separate keys, so, like presence sets, these need a single Redis server.

// ErrOverQuota is matched (errors.Is) by the *QuotaError a counted write
// returns when it would take its quota past the limit.
var ErrOverQuota = errors.New("statestore: quota exceeded")

// ErrNeedData is returned by Link when the value has to be created and no
// data was given: call again with the data.
var ErrNeedData = errors.New("statestore: the shared value does not exist; give its data")

// Quota is a byte counter charged by counted writes. Limit > 0 is the most
// it may reach: a write that would take it past Limit writes nothing and
// returns a *QuotaError. Limit <= 0 counts without limiting. Writes that
// shrink are never refused, and the counter never goes below zero.
//
// Outer, when set, is a second counter that SetCounted, AppendCounted and
// DeleteCounted charge with the same change in the same atomic step, under
// its own Limit: the total of many Quotas (a tenant's over its
// workspaces). A write refused by either writes nothing, and the
// *QuotaError's Key says which refused. Outer's own Outer is not used, and
// Link and Unlink do not charge it.
type Quota struct {
	Key   string
	Limit int64
	Outer *Quota
}

// QuotaError says a counted write was refused: the counter at Key had
// counted Used bytes, the write would have added Adding, and the limit is
// Limit.
type QuotaError struct {
	Key                 string
	Used, Adding, Limit int64
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("statestore: quota exceeded: %d bytes used of %d, and the write adds %d", e.Used, e.Limit, e.Adding)
}

// Is makes errors.Is(err, ErrOverQuota) true.
func (e *QuotaError) Is(target error) bool { return target == ErrOverQuota }

// Link is one entry of a shared value's index: Link sets Index[Field] to
// Entry and counts one more reference to the value at Value.
type Link struct {
	Index string
	Field string
	Entry []byte
	// Value is the key of the shared value the entry refers to.
	Value string
	// TTL > 0 keeps the value at least TTL after each Link that refers to
	// it (its expiry only moves later); 0 means no expiry. An expired value
	// reads as absent while entries still refer to it, and stays charged
	// to the quota until its last entry is unlinked.
	TTL time.Duration
	// Quota is charged the value's length when Link creates it, and
	// released when Unlink deletes it. Unlink must be given the same Key.
	Quota Quota
}

// Usage returns the counter of q: the bytes its counted writes keep.
func Usage(ctx context.Context, st Store, q Quota) (int64, error) {
	v, err := st.Get(ctx, q.Key)
	if errors.Is(err, ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("statestore: quota counter %q is not an integer: %w", q.Key, err)
	}
	return n, nil
}

// linksKey and refsKey are the hashes a shared value's index keeps beside it.
func linksKey(index string) string { return index + ":links" }
func refsKey(index string) string  { return index + ":refs" }

// refRecord is the refs hash's value: the number of entries referring to a
// value, and the length charged for it.
func refRecord(count, size int64) []byte {
	return fmt.Appendf(nil, "%d %d", count, size)
}

func parseRefRecord(v []byte) (count, size int64, ok bool) {
	_, err := fmt.Sscanf(string(v), "%d %d", &count, &size)
	return count, size, err == nil
}
