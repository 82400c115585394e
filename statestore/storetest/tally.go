package storetest

import (
	"fmt"
	"testing"

	"github.com/codexec/codexec/statestore"
)

// runTally checks Tally: fields set and removed, their sum kept beside
// them, exact under concurrent writers.
func runTally(t *testing.T, newStore NewStoreFunc) {
	t.Run("Tally", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		ta, ok := b.store.(statestore.Tallier)
		if !ok {
			t.Fatalf("%T does not implement Tallier", b.store)
		}
		key := b.key("tally")
		for _, step := range []struct {
			field string
			n     int64
			sum   int64
		}{{"a", 10, 10}, {"b", 5, 15}, {"a", 3, 8}, {"a", 3, 8}, {"b", 0, 3}, {"c", -7, 3}, {"a", 0, 0}} {
			sum, err := ta.Tally(b.ctx, key, step.field, step.n)
			requireNoErr(t, err, "Tally")
			if sum != step.sum {
				t.Fatalf("Tally(%s, %d) = %d, want %d", step.field, step.n, sum, step.sum)
			}
			if got, err := statestore.TallySum(b.ctx, b.store, key); err != nil || got != step.sum {
				t.Fatalf("TallySum after Tally(%s, %d) = %d, %v; want %d", step.field, step.n, got, err, step.sum)
			}
		}
		all, err := b.store.HGetAll(b.ctx, key)
		requireNoErr(t, err, "HGetAll")
		if len(all) != 0 {
			t.Fatalf("fields set to 0 left in the tally: %q", all)
		}
		_, err = ta.Tally(b.ctx, key, "x", 42)
		requireNoErr(t, err, "Tally")
		if v, err := b.store.HGet(b.ctx, key, "x"); err != nil || string(v) != "42" {
			t.Fatalf("HGet of a tally's field = %q, %v; want 42", v, err)
		}
	})

	t.Run("TallyConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		ta := b.store.(statestore.Tallier)
		key := b.key("tally")
		// 32 writers over 8 fields, each field's writers setting it to the
		// same value in turn: the sum is the fields' sum whatever the order.
		runConcurrently(t, 32, func(i int) error {
			_, err := ta.Tally(b.ctx, key, fmt.Sprintf("f%d", i%8), int64(100+i%8))
			return err
		})
		sum, err := statestore.TallySum(b.ctx, b.store, key)
		requireNoErr(t, err, "TallySum")
		if want := int64(8*100 + 28); sum != want {
			t.Fatalf("TallySum = %d, want %d", sum, want)
		}
	})
}
