package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
)

// runAdmit checks Admit: a set takes members up to its limit, a member
// renews its own place, Leave and expiry free places, and concurrent
// callers never take the set past its limit.
func runAdmit(t *testing.T, newStore NewStoreFunc) {
	t.Run("Admit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		a := b.store.(statestore.Admitter)
		set := b.key("slots")
		admit := func(member string, want bool, wantCount int) statestore.Admission {
			t.Helper()
			got, err := a.Admit(b.ctx, set, member, []byte("d-"+member), 2, longTTL)
			requireNoErr(t, err, "Admit "+member)
			if got.Admitted != want || got.Count != wantCount {
				t.Fatalf("Admit %s: %+v, want admitted %v with %d members", member, got, want, wantCount)
			}
			return got
		}
		admit("a", true, 1)
		admit("b", true, 2)
		if r := admit("c", false, 2); r.Retry <= 0 || r.Retry > longTTL {
			t.Fatalf("refused Admit's Retry %v, want in (0, %v]", r.Retry, longTTL)
		}
		admit("a", true, 2) // renewed, not counted twice
		requireMembers(t, b, set, map[string]string{"a": "d-a", "b": "d-b"})
		requireNoErr(t, b.store.Leave(b.ctx, set, "a"), "Leave")
		admit("c", true, 2)

		unlimited := b.key("unlimited")
		for i := range 5 {
			got, err := a.Admit(b.ctx, unlimited, fmt.Sprint(i), nil, 0, longTTL)
			requireNoErr(t, err, "Admit without a limit")
			if !got.Admitted || got.Count != i+1 {
				t.Fatalf("Admit without a limit: %+v", got)
			}
		}
	})

	t.Run("AdmitExpiry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		a := b.store.(statestore.Admitter)
		set := b.key("window")
		got, err := a.Admit(b.ctx, set, "old", nil, 1, shortTTL)
		requireNoErr(t, err, "Admit")
		if !got.Admitted {
			t.Fatalf("first Admit: %+v", got)
		}
		deadline := time.Now().Add(waitTimeout)
		for {
			got, err = a.Admit(b.ctx, set, "new", nil, 1, longTTL)
			requireNoErr(t, err, "Admit after an expiry")
			if got.Admitted {
				break
			}
			if got.Retry > shortTTL {
				t.Fatalf("Retry %v of a set whose member lives %v", got.Retry, shortTTL)
			}
			if time.Now().After(deadline) {
				t.Fatal("an expired member still holds its place")
			}
			time.Sleep(pollInterval)
		}
		requireMembers(t, b, set, map[string]string{"new": ""})
	})

	t.Run("AdmitConcurrent", func(t *testing.T) {
		t.Parallel()
		b := setup(t, newStore)
		a := b.store.(statestore.Admitter)
		set := b.key("concurrent")
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i := range 40 {
			wg.Go(func() {
				got, err := a.Admit(b.ctx, set, fmt.Sprint(i), nil, 7, longTTL)
				if err != nil {
					t.Error(err)
				}
				if got.Admitted {
					admitted.Add(1)
				}
			})
		}
		wg.Wait()
		if n := admitted.Load(); n != 7 {
			t.Fatalf("%d of 40 concurrent callers admitted to a set of 7", n)
		}
		m, err := b.store.Members(b.ctx, set)
		requireNoErr(t, err, "Members")
		if len(m) != 7 {
			t.Fatalf("%d members, want 7", len(m))
		}
	})
}
