package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/codexec/codexec/statestore"
)

// runCounted checks SetCounted, AppendCounted and DeleteCounted: the write
// and its quota change together, refusals write nothing.
func runCounted(t *testing.T, newStore NewStoreFunc) {
	t.Run("Counted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		q := statestore.Quota{Key: b.key("quota"), Limit: 10}
		k := b.key("k")
		requireUsage(t, b, q, 0)

		old, err := b.store.SetCounted(b.ctx, k, []byte("abcd"), q)
		requireNoErr(t, err, "SetCounted of a new key")
		if old != -1 {
			t.Fatalf("SetCounted of a new key returned old length %d, want -1", old)
		}
		requireUsage(t, b, q, 4)
		old, err = b.store.SetCounted(b.ctx, k, []byte("ab"), q)
		requireNoErr(t, err, "SetCounted shrinking")
		if old != 4 {
			t.Fatalf("SetCounted returned old length %d, want 4", old)
		}
		requireUsage(t, b, q, 2)

		n, err := b.store.AppendCounted(b.ctx, k, []byte("cdefgh"), 0, q)
		requireNoErr(t, err, "AppendCounted")
		if n != 8 {
			t.Fatalf("AppendCounted returned length %d, want 8", n)
		}
		requireUsage(t, b, q, 8)

		// maxLen is checked before the quota, and a refusal charges nothing.
		_, err = b.store.AppendCounted(b.ctx, k, []byte("xyz"), 9, q)
		requireIs(t, err, statestore.ErrTooLarge, "AppendCounted past maxLen")
		requireUsage(t, b, q, 8)

		// Past the quota: refused with the figures, nothing written.
		_, err = b.store.AppendCounted(b.ctx, k, []byte("xyz"), 0, q)
		requireQuotaError(t, err, 8, 3, 10, "AppendCounted past the quota")
		requireValue(t, b, k, "abcdefgh")
		k2 := b.key("k2")
		_, err = b.store.SetCounted(b.ctx, k2, []byte("xyz"), q)
		requireQuotaError(t, err, 8, 3, 10, "SetCounted past the quota")
		_, err = b.store.Get(b.ctx, k2)
		requireIs(t, err, statestore.ErrNotFound, "Get after a refused SetCounted")
		_, err = b.store.SetCounted(b.ctx, k, []byte("0123456789a"), q)
		requireQuotaError(t, err, 8, 3, 10, "SetCounted growing past the quota")
		requireValue(t, b, k, "abcdefgh")
		requireUsage(t, b, q, 8)

		// Exactly at the limit is allowed.
		_, err = b.store.SetCounted(b.ctx, k2, []byte("xy"), q)
		requireNoErr(t, err, "SetCounted up to the limit")
		requireUsage(t, b, q, 10)

		// A lower limit refuses growth but never shrinking.
		low := statestore.Quota{Key: q.Key, Limit: 5}
		_, err = b.store.SetCounted(b.ctx, k, []byte("abcdefg"), low)
		requireNoErr(t, err, "SetCounted shrinking over the limit")
		requireUsage(t, b, q, 9)

		n, err = b.store.DeleteCounted(b.ctx, k, q)
		requireNoErr(t, err, "DeleteCounted")
		if n != 7 {
			t.Fatalf("DeleteCounted returned length %d, want 7", n)
		}
		requireUsage(t, b, q, 2)
		_, err = b.store.Get(b.ctx, k)
		requireIs(t, err, statestore.ErrNotFound, "Get after DeleteCounted")
		_, err = b.store.DeleteCounted(b.ctx, k, q)
		requireIs(t, err, statestore.ErrNotFound, "DeleteCounted of a missing key")
		requireUsage(t, b, q, 2)

		// A value never charged releases no more than the counter holds.
		plain := b.key("plain")
		requireNoErr(t, b.store.Set(b.ctx, plain, []byte("uncounted"), 0), "Set")
		_, err = b.store.DeleteCounted(b.ctx, plain, q)
		requireNoErr(t, err, "DeleteCounted of an uncharged value")
		requireUsage(t, b, q, 0)

		// Limit 0 counts without limiting.
		free := statestore.Quota{Key: b.key("free")}
		_, err = b.store.AppendCounted(b.ctx, b.key("big"), []byte(strings.Repeat("x", 1000)), 0, free)
		requireNoErr(t, err, "AppendCounted without a limit")
		requireUsage(t, b, free, 1000)
	})

	t.Run("CountedOuter", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		// Two workspaces' counters under one tenant's outer counter: the
		// outer one refuses what the inner would take, writing nothing, and
		// each write and delete moves both.
		outer := &statestore.Quota{Key: b.key("tenant"), Limit: 12}
		q1 := statestore.Quota{Key: b.key("ws1"), Limit: 10, Outer: outer}
		q2 := statestore.Quota{Key: b.key("ws2"), Limit: 10, Outer: outer}
		_, err := b.store.SetCounted(b.ctx, b.key("a"), []byte("01234567"), q1)
		requireNoErr(t, err, "SetCounted")
		_, err = b.store.AppendCounted(b.ctx, b.key("b"), []byte("0123"), 0, q2)
		requireNoErr(t, err, "AppendCounted")
		requireUsage(t, b, *outer, 12)
		_, err = b.store.SetCounted(b.ctx, b.key("c"), []byte("x"), q2)
		requireQuotaError(t, err, 12, 1, 12, "SetCounted past the outer quota")
		if qe := (*statestore.QuotaError)(nil); !errors.As(err, &qe) || qe.Key != outer.Key {
			t.Fatalf("refused by %v, want the outer counter %s", err, outer.Key)
		}
		_, err = b.store.Get(b.ctx, b.key("c"))
		requireIs(t, err, statestore.ErrNotFound, "Get after a refused SetCounted")
		_, err = b.store.AppendCounted(b.ctx, b.key("b"), []byte("x"), 0, q2)
		requireQuotaError(t, err, 12, 1, 12, "AppendCounted past the outer quota")
		requireUsage(t, b, q2, 4)
		_, err = b.store.SetCounted(b.ctx, b.key("a"), []byte("0123456789a"), q1)
		requireQuotaError(t, err, 8, 3, 10, "SetCounted past the inner quota")
		if qe := (*statestore.QuotaError)(nil); !errors.As(err, &qe) || qe.Key != q1.Key {
			t.Fatalf("refused by %v, want the inner counter %s", err, q1.Key)
		}
		_, err = b.store.DeleteCounted(b.ctx, b.key("a"), q1)
		requireNoErr(t, err, "DeleteCounted")
		requireUsage(t, b, q1, 0)
		requireUsage(t, b, *outer, 4)
		_, err = b.store.SetCounted(b.ctx, b.key("c"), []byte("x"), q2)
		requireNoErr(t, err, "SetCounted after a delete made room")
		requireUsage(t, b, q2, 5)
		requireUsage(t, b, *outer, 5)
	})

	t.Run("CountedConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		// 32 writers of 10 bytes each against a 100-byte quota: exactly ten
		// land, on any number of keys, and the counter says so.
		q := statestore.Quota{Key: b.key("quota"), Limit: 100}
		var landed [32]bool
		runConcurrently(t, 32, func(i int) error {
			k := b.key(fmt.Sprintf("k%d", i%4))
			_, err := b.store.AppendCounted(b.ctx, k, []byte("0123456789"), 0, q)
			if errors.Is(err, statestore.ErrOverQuota) {
				return nil
			}
			landed[i] = err == nil
			return err
		})
		var n, total int64
		for _, ok := range landed {
			if ok {
				n++
			}
		}
		for i := range 4 {
			if l, err := b.store.Len(b.ctx, b.key(fmt.Sprintf("k%d", i))); err == nil {
				total += l
			}
		}
		if n != 10 || total != 100 {
			t.Fatalf("%d appends landed, %d bytes stored; want 10 and 100", n, total)
		}
		requireUsage(t, b, q, 100)
	})
}

// runShared checks Link and Unlink: one value per key however many entries
// refer to it, deleted with its last reference, charged once.
func runShared(t *testing.T, newStore NewStoreFunc) {
	t.Run("Link", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		q := statestore.Quota{Key: b.key("quota"), Limit: 100}
		index, value := b.key("index"), b.key("value")
		link := func(field string) statestore.Link {
			return statestore.Link{Index: index, Field: field, Entry: []byte("entry " + field), Value: value, Quota: q}
		}
		_, err := b.store.Link(b.ctx, link("a"), nil)
		requireIs(t, err, statestore.ErrNeedData, "Link to a missing value without data")
		requireHashLen(t, b, index, 0)

		requireLink(t, b, link("a"), []byte("0123456789"), true)
		requireValue(t, b, value, "0123456789")
		requireUsage(t, b, q, 10)
		// Further entries need no data and are not charged again.
		requireLink(t, b, link("b"), nil, true)
		requireLink(t, b, link("c"), []byte("0123456789"), true)
		requireUsage(t, b, q, 10)
		// A field already there changes nothing.
		requireLink(t, b, statestore.Link{Index: index, Field: "a", Entry: []byte("other"), Value: b.key("v2"), Quota: q}, []byte("xx"), false)
		got, err := b.store.HGetAll(b.ctx, index)
		requireNoErr(t, err, "HGetAll of the index")
		requireMap(t, got, map[string]string{"a": "entry a", "b": "entry b", "c": "entry c"}, "the index")

		requireNoErr(t, b.store.Unlink(b.ctx, index, q, "a", "missing"), "Unlink")
		requireValue(t, b, value, "0123456789")
		requireUsage(t, b, q, 10)
		// Unlinking a field twice drops one reference, not two.
		requireNoErr(t, b.store.Unlink(b.ctx, index, q, "b", "b"), "Unlink twice")
		requireValue(t, b, value, "0123456789")
		requireNoErr(t, b.store.Unlink(b.ctx, index, q, "c"), "Unlink the last entry")
		_, err = b.store.Get(b.ctx, value)
		requireIs(t, err, statestore.ErrNotFound, "Get after the last Unlink")
		requireUsage(t, b, q, 0)
		requireHashLen(t, b, index, 0)
		requireNoErr(t, b.store.Unlink(b.ctx, index, q), "Unlink of no fields")

		// Creating a value past the quota is refused and writes nothing;
		// linking to one that exists is not charged, so it passes.
		requireLink(t, b, link("d"), []byte("0123456789"), true)
		big := statestore.Link{Index: index, Field: "e", Entry: []byte("e"), Value: b.key("big"), Quota: q}
		_, err = b.store.Link(b.ctx, big, make([]byte, 91))
		requireQuotaError(t, err, 10, 91, 100, "Link of a value past the quota")
		_, err = b.store.Get(b.ctx, big.Value)
		requireIs(t, err, statestore.ErrNotFound, "Get after a refused Link")
		requireHashLen(t, b, index, 1)
		full := statestore.Quota{Key: q.Key, Limit: 5}
		requireLink(t, b, statestore.Link{Index: index, Field: "f", Entry: []byte("f"), Value: value, Quota: full}, nil, true)
		requireUsage(t, b, q, 10)
	})

	t.Run("LinkTTL", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		q := statestore.Quota{Key: b.key("quota")}
		index, value := b.key("index"), b.key("value")
		l := statestore.Link{Index: index, Field: "a", Entry: []byte("a"), Value: value, TTL: shortTTL, Quota: q}
		requireLink(t, b, l, []byte("data"), true)
		waitNotFound(t, b, value)
		// The entry still refers to the expired value, so it stays charged;
		// a new entry brings the value back without charging it again.
		requireUsage(t, b, q, 4)
		l.Field, l.TTL = "b", longTTL
		_, err := b.store.Link(b.ctx, l, nil)
		requireIs(t, err, statestore.ErrNeedData, "Link to an expired value without data")
		requireLink(t, b, l, []byte("data"), true)
		requireValue(t, b, value, "data")
		requireUsage(t, b, q, 4)
		// A shorter ttl never brings the expiry forward.
		l.Field, l.TTL = "c", shortTTL
		requireLink(t, b, l, nil, true)
		requireNoErr(t, b.store.Unlink(b.ctx, index, q, "a", "b"), "Unlink")
		requireValue(t, b, value, "data")
		requireNoErr(t, b.store.Unlink(b.ctx, index, q, "c"), "Unlink the last entry")
		requireUsage(t, b, q, 0)
	})

	t.Run("LinkConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		q := statestore.Quota{Key: b.key("quota"), Limit: 1000}
		index, value := b.key("index"), b.key("value")
		data := []byte(strings.Repeat("v", 100))
		// 32 writers link an entry each and unlink it again, racing so that
		// the value is created, deleted and created again; the even ones
		// then link a second entry and keep it.
		linkOne := func(field string) error {
			l := statestore.Link{Index: index, Field: field, Entry: []byte(field), Value: value, Quota: q}
			_, err := b.store.Link(b.ctx, l, nil)
			if errors.Is(err, statestore.ErrNeedData) {
				_, err = b.store.Link(b.ctx, l, data)
			}
			return err
		}
		runConcurrently(t, 32, func(i int) error {
			f := fmt.Sprintf("f%d", i)
			if err := linkOne(f); err != nil {
				return err
			}
			if err := b.store.Unlink(b.ctx, index, q, f); err != nil {
				return err
			}
			if i%2 == 0 {
				return linkOne(f + "-kept")
			}
			return nil
		})
		requireHashLen(t, b, index, 16)
		requireValue(t, b, value, string(data))
		requireUsage(t, b, q, 100)
		runConcurrently(t, 16, func(i int) error {
			return b.store.Unlink(b.ctx, index, q, fmt.Sprintf("f%d-kept", 2*i))
		})
		_, err := b.store.Get(b.ctx, value)
		requireIs(t, err, statestore.ErrNotFound, "Get after every entry is unlinked")
		requireUsage(t, b, q, 0)
	})
}

func requireUsage(t *testing.T, b bundle, q statestore.Quota, want int64) {
	t.Helper()
	n, err := statestore.Usage(b.ctx, b.store, q)
	requireNoErr(t, err, "Usage")
	if n != want {
		t.Fatalf("Usage = %d, want %d", n, want)
	}
}

func requireQuotaError(t *testing.T, err error, used, adding, limit int64, what string) {
	t.Helper()
	var qe *statestore.QuotaError
	if !errors.As(err, &qe) || !errors.Is(err, statestore.ErrOverQuota) {
		t.Fatalf("%s: got error %v, want a *QuotaError", what, err)
	}
	if qe.Used != used || qe.Adding != adding || qe.Limit != limit {
		t.Fatalf("%s: got %+v, want used %d, adding %d, limit %d", what, *qe, used, adding, limit)
	}
}

func requireLink(t *testing.T, b bundle, l statestore.Link, data []byte, want bool) {
	t.Helper()
	linked, err := b.store.Link(b.ctx, l, data)
	requireNoErr(t, err, fmt.Sprintf("Link %q", l.Field))
	if linked != want {
		t.Fatalf("Link %q = %v, want %v", l.Field, linked, want)
	}
}

func requireHashLen(t *testing.T, b bundle, key string, want int64) {
	t.Helper()
	n, err := b.store.HLen(b.ctx, key)
	requireNoErr(t, err, fmt.Sprintf("HLen %q", key))
	if n != want {
		t.Fatalf("HLen %q = %d, want %d", key, n, want)
	}
}
