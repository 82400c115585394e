package broker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/broker/brokertest"
)

// A job's claim is create-only: the second worker to claim it gets the
// first one's claim back, unchanged.
func TestClaimJobIsCreateOnly(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	job := ulid.Make().String()

	first, won, err := tb.b.ClaimJob(ctx, job, broker.Claim{Worker: "w1", Instance: "w1@a", Attempt: 1})
	if err != nil || !won {
		t.Fatalf("first claim: won=%v err=%v", won, err)
	}
	held, won, err := tb.b.ClaimJob(ctx, job, broker.Claim{Worker: "w2", Instance: "w2@a", Attempt: 2})
	if err != nil || won {
		t.Fatalf("second claim: won=%v err=%v", won, err)
	}
	if held.Worker != "w1" || held.Instance != "w1@a" || held.Revision != first.Revision {
		t.Errorf("second claim got %+v, want w1's %+v", held, first)
	}
	got, found, err := tb.b.GetClaim(ctx, job)
	if err != nil || !found || got.Worker != "w1" {
		t.Errorf("GetClaim: %+v %v %v", got, found, err)
	}
	if _, found, err := tb.b.GetClaim(ctx, ulid.Make().String()); err != nil || found {
		t.Errorf("GetClaim of an unclaimed job: found=%v err=%v", found, err)
	}
}

// Of workers taking over the same claim at once, exactly one wins; the
// others get ErrClaimChanged.
func TestTakeOverClaimIsAtomic(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	job := ulid.Make().String()
	dead, _, err := tb.b.ClaimJob(ctx, job, broker.Claim{Worker: "dead", Instance: "dead@a", Attempt: 1})
	if err != nil {
		t.Fatal(err)
	}

	const takers = 8
	var wg sync.WaitGroup
	errs := make([]error, takers)
	for i := range takers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = tb.b.TakeOverClaim(ctx, job, broker.Claim{Worker: "w", Instance: ulid.Make().String(), Attempt: 2}, dead.Revision)
		}()
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, broker.ErrClaimChanged):
			t.Errorf("take over: %v", err)
		}
	}
	if wins != 1 {
		t.Errorf("%d of %d takeovers won, want exactly 1", wins, takers)
	}
}

// A claim is released only at its revision; once released, the job can be
// claimed afresh.
func TestReleaseClaim(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	job := ulid.Make().String()
	old, _, err := tb.b.ClaimJob(ctx, job, broker.Claim{Worker: "w1", Instance: "w1@a"})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := tb.b.TakeOverClaim(ctx, job, broker.Claim{Worker: "w2", Instance: "w2@a"}, old.Revision)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.b.ReleaseClaim(ctx, job, old.Revision); !errors.Is(err, broker.ErrClaimChanged) {
		t.Fatalf("release at a stale revision: %v, want ErrClaimChanged", err)
	}
	if err := tb.b.ReleaseClaim(ctx, job, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if _, found, err := tb.b.GetClaim(ctx, job); err != nil || found {
		t.Fatalf("released claim still found (%v) or error %v", found, err)
	}
	if held, won, err := tb.b.ClaimJob(ctx, job, broker.Claim{Worker: "w3", Instance: "w3@a"}); err != nil || !won || held.Worker != "w3" {
		t.Errorf("claim after release: %+v won=%v err=%v", held, won, err)
	}
}

// BenchmarkClaimJob measures what claims add to every job: one create-only
// write to the claims bucket, on an in-process server. Run it with
// BenchmarkRoundTrip to see it beside a job's whole way through the broker.
func BenchmarkClaimJob(b *testing.B) {
	e := brokertest.StartNATSWith(b, broker.EmbeddedConfig{})
	br := brokertest.Open(b, e, broker.Config{})
	ctx := context.Background()
	c := broker.Claim{Worker: "w1", Instance: "w1@a", Attempt: 1}
	for b.Loop() {
		if _, won, err := br.ClaimJob(ctx, ulid.Make().String(), c); err != nil || !won {
			b.Fatal(won, err)
		}
	}
}

// A confirmation retried after a try that timed out but was written (NATS
// restarting) finds the claim moved on by its own write, and is confirmed:
// taken for a takeover, the attempt dropped its files and result and the
// job ran a second time on the same worker. A takeover still refuses it.
func TestConfirmClaimRetryAfterItsOwnWrite(t *testing.T) {
	t.Parallel()
	tb := setup(t, broker.EmbeddedConfig{}, broker.Config{})
	ctx := testCtx(t)
	job := ulid.Make().String()
	held, _, err := tb.b.ClaimJob(ctx, job, broker.Claim{Worker: "w1", Instance: "w1@a", Attempt: 1, At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	// The first try, written though its caller saw a timeout.
	if _, err := tb.b.ConfirmClaim(ctx, job, held); err != nil {
		t.Fatal(err)
	}
	// The retry, with the revision the attempt still knows.
	got, err := tb.b.ConfirmClaim(ctx, job, held)
	if err != nil {
		t.Fatalf("retried confirmation of the claim's own holder: %v, want it confirmed", err)
	}
	cur, _, err := tb.b.GetClaim(ctx, job)
	if err != nil || got.Revision != cur.Revision || got.Instance != "w1@a" {
		t.Fatalf("confirmed %+v, stored %+v (%v)", got, cur, err)
	}

	// Taken over by another attempt: the old holder's confirmation fails.
	if _, err := tb.b.TakeOverClaim(ctx, job, broker.Claim{Worker: "w2", Instance: "w2@a", Attempt: 2, At: time.Now().UTC()}, cur.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.ConfirmClaim(ctx, job, held); !errors.Is(err, broker.ErrClaimChanged) {
		t.Fatalf("confirmation after a takeover: %v, want ErrClaimChanged", err)
	}
	// Taken over by a later attempt of the same worker instance: fails too.
	job2 := ulid.Make().String()
	h1, _, err := tb.b.ClaimJob(ctx, job2, broker.Claim{Worker: "w1", Instance: "w1@a", Attempt: 1, At: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.TakeOverClaim(ctx, job2, broker.Claim{Worker: "w1", Instance: "w1@a", Attempt: 2, At: time.Now().UTC()}, h1.Revision); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.b.ConfirmClaim(ctx, job2, h1); !errors.Is(err, broker.ErrClaimChanged) {
		t.Fatalf("confirmation after a later attempt's takeover: %v, want ErrClaimChanged", err)
	}
}
