package statestore

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codexec/codexec/statestore/redistest"
)

// TestRedisKeyLayout pins the documented Redis layout, which operators and
// other tools may rely on.
func TestRedisKeyLayout(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ctx := t.Context()
	s, err := NewRedis(ctx, RedisOptions{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	raw := s.client

	if err := s.Set(ctx, "k", []byte("v"), 1500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if pttl := raw.PTTL(ctx, "k").Val(); pttl <= time.Second || pttl > 1500*time.Millisecond {
		t.Errorf("PTTL after Set with 1.5s = %v, want the ttl to the millisecond", pttl)
	}

	if err := s.Touch(ctx, "workers", "w1", []byte("d1"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if typ := raw.Type(ctx, "workers").Val(); typ != "zset" {
		t.Errorf("presence set is a %s, want zset", typ)
	}
	if v := raw.HGet(ctx, "workers:data", "w1").Val(); v != "d1" {
		t.Errorf("presence data = %q, want d1", v)
	}
	for _, k := range []string{"workers", "workers:data"} {
		if pttl := raw.PTTL(ctx, k).Val(); pttl <= 0 || pttl > time.Minute {
			t.Errorf("PTTL %s = %v, want it to expire with its members", k, pttl)
		}
	}

	// Members prunes expired members from both keys.
	if err := s.Touch(ctx, "workers", "w2", []byte("d2"), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.Members(ctx, "workers")
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m["w2"]; !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("w2 never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := raw.ZCard(ctx, "workers").Val(); n != 1 {
		t.Errorf("ZCARD after pruning = %d, want 1", n)
	}
	if err := raw.HGet(ctx, "workers:data", "w2").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("HGET of a pruned member's data: %v, want redis.Nil", err)
	}
}
