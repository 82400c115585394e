package statestore_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/statestore/redistest"
	"github.com/codexec/codexec/statestore/storetest"
)

func newRedis(t *testing.T, url string) statestore.Store {
	t.Helper()
	s, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{URL: url})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisStore(t *testing.T) {
	t.Parallel()
	// One server for the whole suite: subtests isolate themselves by key prefix.
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T) statestore.Store { return newRedis(t, srv.URL()) })
}

func TestRedisStoreRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	storetest.RunRestart(t,
		func(t *testing.T) statestore.Store { return newRedis(t, srv.URL()) },
		func(t *testing.T) { srv.Restart(t) },
	)
}

func TestNewRedisErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	if _, err := statestore.NewRedis(ctx, statestore.RedisOptions{}); err == nil {
		t.Error("NewRedis without URL or Client succeeded")
	}
	if _, err := statestore.NewRedis(ctx, statestore.RedisOptions{URL: "http://example.com"}); err == nil {
		t.Error("NewRedis with an http URL succeeded")
	}

	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	// No retries: the test needs one failed dial, not go-redis's backoff.
	_, err = statestore.NewRedis(ctx, statestore.RedisOptions{URL: "redis://" + addr + "/0?max_retries=-1"})
	if err == nil {
		t.Fatal("NewRedis to a closed port succeeded")
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("NewRedis to a closed port: %v, want it to wrap the dial error", err)
	}
}

func TestRedisStoreLeavesCallersClientOpen(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })

	s, err := statestore.NewRedis(t.Context(), statestore.RedisOptions{Client: client})
	if err != nil {
		t.Fatalf("NewRedis: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Ping(t.Context()); !errors.Is(err, statestore.ErrClosed) {
		t.Errorf("Ping after Close = %v, want ErrClosed", err)
	}
	if err := client.Ping(t.Context()).Err(); err != nil {
		t.Errorf("caller's client after Close: %v", err)
	}
}
