package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
)

const sentinelMaster = "codexec"

// newSentinelStore connects a store to the primary that sentinels monitor.
// The URL's host is not used (the sentinels name the primary).
func newSentinelStore(t *testing.T, sentinels []*redistest.Sentinel, wait int) statestore.Store {
	t.Helper()
	s, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{
		URL:           "redis://unused:1/0",
		SentinelAddrs: redistest.SentinelAddrs(sentinels),
		MasterName:    sentinelMaster,
		WaitReplicas:  wait,
	})
	if err != nil {
		t.Fatalf("NewRedis through sentinels: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// WaitReplicas makes writes wait for replicas: with none to wait for, a
// write fails with ErrNotReplicated (it is on the primary all the same);
// with a replica, it succeeds.
func TestRedisWaitReplicas(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	ctx := t.Context()
	s, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: primary.URL(), WaitReplicas: 1, WaitTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Append(ctx, "k", []byte("a"), 0); !errors.Is(err, statestore.ErrNotReplicated) {
		t.Fatalf("Append without a replica: %v, want ErrNotReplicated", err)
	}
	if ok, err := s.SetNX(ctx, "nx", []byte("v"), 0); !errors.Is(err, statestore.ErrNotReplicated) || ok {
		t.Fatalf("SetNX without a replica: %v %v, want ErrNotReplicated", ok, err)
	}
	q := statestore.Quota{Key: "q", Limit: 1 << 20}
	if _, err := s.SetCounted(ctx, "c", []byte("v"), q); !errors.Is(err, statestore.ErrNotReplicated) {
		t.Fatalf("SetCounted without a replica: %v, want ErrNotReplicated", err)
	}
	link := statestore.Link{Index: "idx", Field: "f", Entry: []byte("e"), Value: "val", Quota: q}
	if _, err := s.Link(ctx, link, []byte("code")); !errors.Is(err, statestore.ErrNotReplicated) {
		t.Fatalf("Link without a replica: %v, want ErrNotReplicated", err)
	}
	if err := s.Unlink(ctx, "idx", q, "f"); !errors.Is(err, statestore.ErrNotReplicated) {
		t.Fatalf("Unlink without a replica: %v, want ErrNotReplicated", err)
	}
	if err := s.Touch(ctx, "set", "m", []byte("d"), time.Minute); err != nil {
		t.Fatalf("Touch (presence never waits): %v", err)
	}

	redistest.StartReplica(t, primary)
	// With a replica, a generous timeout: only the count is under test, and
	// a loaded machine can take more than 100ms to confirm.
	s, err = statestore.NewRedis(ctx, statestore.RedisOptions{URL: primary.URL(), WaitReplicas: 1, WaitTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if n, err := s.Append(ctx, "k", []byte("b"), 0); err != nil || n != 2 {
		t.Fatalf("Append with a replica: %d %v", n, err)
	}
	if ok, err := s.SetNX(ctx, "nx", []byte("v"), 0); err != nil || ok {
		t.Fatalf("SetNX of an existing key with a replica: %v %v", ok, err)
	}
	if _, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: primary.URL(), WaitReplicas: -1}); err == nil {
		t.Fatal("NewRedis with WaitReplicas -1 succeeded")
	}
}

// The store follows a Sentinel failover by itself: appends go on while the
// primary is killed with SIGKILL, some fail with an error during the
// failover, and every append that was acknowledged is in the value once,
// read back from the promoted replica. Two replicas, so that the new
// primary still has one to WAIT for.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	other := redistest.StartReplica(t, primary)
	sentinels := redistest.StartSentinels(t, primary, sentinelMaster, 3, 2)
	s := newSentinelStore(t, sentinels, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 45*time.Second)
	defer cancel()

	if err := s.Set(ctx, "before", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	r := runAppends(ctx, s, 4, func() { primary.Kill() })
	if ctx.Err() != nil {
		t.Fatalf("no append succeeded after the primary was killed: %s", r)
	}
	// Every sentinel learns of the new primary, some later than others.
	for _, sn := range sentinels {
		for {
			got, err := sn.PrimaryAddr(sentinelMaster)
			if err == nil && (got == replica.Addr || got == other.Addr) {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("sentinel %s: primary after the failover: %q %v, want one of the replicas %s, %s",
					sn.Addr, got, err, replica.Addr, other.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	value, err := s.Get(ctx, "log")
	if err != nil {
		t.Fatal(err)
	}
	lost, twice := r.check(string(value))
	t.Logf("redis sentinel failover: %s, lost %d, applied twice %d", r, lost, twice)
	if lost != 0 || twice != 0 {
		t.Errorf("lost %d acknowledged appends, applied %d twice", lost, twice)
	}
	if v, err := s.Get(ctx, "before"); err != nil || string(v) != "kept" {
		t.Errorf("a value written before the failover: %q %v", v, err)
	}
}

// appendRun is what runAppends did: the marker of each append, by outcome.
type appendRun struct {
	acked, failed []string
	errors        []string // the first few errors
	// recovered is the time from the kill to the first acknowledgement of
	// an append sent after it.
	recovered time.Duration
}

func (r *appendRun) String() string {
	return fmt.Sprintf("%d appends, %d ok, %d errors (%s), first ok %s after the kill",
		len(r.acked)+len(r.failed), len(r.acked), len(r.failed), strings.Join(r.errors, "; "), r.recovered.Round(10*time.Millisecond))
}

// check counts the acknowledged markers missing from value and the markers
// found more than once.
func (r *appendRun) check(value string) (lost, twice int) {
	count := map[string]int{}
	for _, line := range strings.Split(strings.TrimSuffix(value, "\n"), "\n") {
		count[line]++
	}
	for _, m := range r.acked {
		if count[m] == 0 {
			lost++
		}
	}
	for _, n := range count {
		if n > 1 {
			twice++
		}
	}
	return lost, twice
}

// runAppends appends unique lines to "log" from n goroutines; after 50
// acknowledged appends it calls kill, and it stops once 50 more have been
// acknowledged after the kill, or ctx ends.
func runAppends(ctx context.Context, s statestore.Store, n int, kill func()) *appendRun {
	const before, after = 50, 50
	var (
		mu       sync.Mutex
		r        appendRun
		killedAt time.Time
		okAfter  int
		wg       sync.WaitGroup
	)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; runCtx.Err() == nil; i++ {
				marker := fmt.Sprintf("g%d-%d", g, i)
				mu.Lock()
				startedAfterKill := !killedAt.IsZero()
				mu.Unlock()
				callCtx, cancel := context.WithTimeout(runCtx, 5*time.Second)
				_, err := s.Append(callCtx, "log", []byte(marker+"\n"), 0)
				cancel()
				mu.Lock()
				switch {
				case err != nil && runCtx.Err() != nil:
					// Cut short at the end of the run: neither outcome.
				case err != nil:
					r.failed = append(r.failed, marker)
					if len(r.errors) < 3 {
						r.errors = append(r.errors, err.Error())
					}
				default:
					r.acked = append(r.acked, marker)
					if startedAfterKill {
						if okAfter++; okAfter == 1 {
							r.recovered = time.Since(killedAt)
						} else if okAfter >= after {
							stop()
						}
					} else if len(r.acked) == before {
						killedAt = time.Now()
						kill()
					}
				}
				mu.Unlock()
				if err != nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return &r
}
