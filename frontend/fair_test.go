package frontend

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/broker"
	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/frontend/auth"
	"github.com/codexec/codexec/wire"
	"github.com/oklog/ulid/v2"
)

// A burst of one scope does not hold back another scope's job: with one
// worker slot, scope A queues 50 jobs, then scope B one; B's job starts
// before A's 10th (it is published behind A's share: one slot plus two).
// Without admission it would start after all 50.
func TestBurstDoesNotStarveAnotherScope(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	f := jb.f
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: wire.DefaultPool, Concurrency: 1})
	if err := f.store.Touch(t.Context(), f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}

	const burst = 50
	var wg sync.WaitGroup
	var mu sync.Mutex
	dispatched := 0
	for range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			job := fairJob("a")
			target, err := f.dispatch(t.Context(), job, nil)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			dispatched++
			mu.Unlock()
			if _, err := f.awaitResult(t.Context(), job, target); err != nil {
				t.Error(err)
			}
		}()
	}
	// Every job of A is published or waits for admission before B's comes.
	for {
		mu.Lock()
		n := dispatched + f.fair.waiting(fairJob("a"))
		mu.Unlock()
		if n == burst {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b := fairJob("b")
	if _, err := f.dispatch(t.Context(), b, nil); err != nil {
		t.Fatal(err)
	}

	// Only now a worker of one slot starts taking jobs, in queue order.
	var order []string
	c, err := jb.b.Consume(t.Context(), wire.DefaultPool, 1, func(ctx context.Context, d *broker.Delivery) {
		mu.Lock()
		order = append(order, d.Job.Scope)
		mu.Unlock()
		if _, err := jb.b.PutResult(ctx, &wire.Result{JobID: d.Job.ID, Scope: d.Job.Scope, Status: wire.StatusOK}); err != nil {
			_ = d.Nak(time.Second)
			return
		}
		_ = d.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	at := slices.Index(order, "b")
	if at < 0 || at > 9 {
		t.Fatalf("B's job started %dth, after %d of A's (start order %v); want before A's 10th", at+1, at, order)
	}
}

// Within one tenant, the scopes waiting for admission take turns: a scope
// with one job waiting goes next, ahead of another scope's long queue.
func TestTenantScopesTakeTurns(t *testing.T) {
	t.Parallel()
	var g fairGate
	job := func(scope string) *wire.Job {
		j := fairJob(scope)
		j.Tenant = "acme"
		return j
	}
	const limit = 1
	first := job("a")
	if err := g.admit(t.Context(), first, limit, 0); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	admitted := make(chan *wire.Job)
	waiting := 0
	enqueue := func(j *wire.Job) {
		waiting++
		go func() {
			if err := g.admit(t.Context(), j, limit, 0); err != nil {
				t.Error(err)
			}
			mu.Lock()
			order = append(order, j.Scope)
			mu.Unlock()
			admitted <- j
		}()
		for g.waiting(j) < waiting {
			time.Sleep(time.Millisecond)
		}
	}
	for range 5 {
		enqueue(job("a"))
	}
	enqueue(job("b"))
	// Another tenant is not held by acme's share.
	if err := g.admit(t.Context(), fairJob("c"), limit, 0); err != nil {
		t.Fatal(err)
	}

	g.release(first.ID)
	for range 6 {
		j := <-admitted
		g.release(j.ID)
	}
	want := []string{"a", "b", "a", "a", "a", "a"}
	if !slices.Equal(order, want) {
		t.Fatalf("admission order %v, want %v", order, want)
	}
}

// A job that waits for admission past its deadline is not admitted, and
// gives up its turn.
func TestAdmissionEndsAtDeadline(t *testing.T) {
	t.Parallel()
	var g fairGate
	held := fairJob("a")
	if err := g.admit(t.Context(), held, 1, 0); err != nil {
		t.Fatal(err)
	}
	late := fairJob("a")
	late.Deadline = time.Now().Add(50 * time.Millisecond)
	if err := g.admit(t.Context(), late, 1, 0); err == nil {
		t.Fatal("a job admitted past its deadline while its tenant's share was full")
	}
	if n := g.waiting(late); n != 0 {
		t.Fatalf("%d jobs still wait after giving up", n)
	}
	g.release(held.ID)
	next := fairJob("a")
	if err := g.admit(t.Context(), next, 1, 0); err != nil {
		t.Fatal(err)
	}
}

// The scopes of one authenticated tenant share its share: with a share of
// one, a job of the tenant's second scope waits while its first scope's job
// is queued, and is queued once that one is done.
func TestTenantFromCredentialsSharesItsShare(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{FairShare: 1})
	f := jb.f
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: wire.DefaultPool, Concurrency: 4})
	if err := f.store.Touch(t.Context(), f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	ctx := auth.NewContext(t.Context(), auth.Identity{Tenant: "acme", Principal: "ann"})
	first := fairJob("a")
	if _, err := f.dispatch(ctx, first, nil); err != nil {
		t.Fatal(err)
	}
	if first.Tenant != "acme" {
		t.Fatalf("job tenant %q, want the caller's, acme", first.Tenant)
	}
	second := fairJob("b")
	done := make(chan error, 1)
	go func() {
		_, err := f.dispatch(ctx, second, nil)
		done <- err
	}()
	acme := &wire.Job{Tenant: "acme"} // second is dispatch's while it runs
	for f.fair.waiting(acme) == 0 {
		select {
		case err := <-done:
			t.Fatalf("the tenant's second scope was queued beside its first (err %v)", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	f.fair.release(first.ID)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.fair.release(second.ID)
}

func fairJob(scope string) *wire.Job {
	now := time.Now().UTC()
	return &wire.Job{ID: ulid.Make().String(), Kind: wire.KindExecute, Pool: wire.DefaultPool, Scope: scope,
		Code: fmt.Sprintf("print(%q)", scope), TimeoutMS: 1000, EnqueuedAt: now, Deadline: now.Add(time.Minute)}
}
