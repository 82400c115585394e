package frontend

import (
	"context"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/codexec/codexec/statestore"
)

// A principal revoked in the state store is refused by the frontend on its
// next request (within a second), with its connection already open too;
// another principal of the tenant goes on; revoking the tenant refuses
// every principal of it; lifting the revocation lets them in again.
func TestHTTPRevoked(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	bob, err := fx.connect(t, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	revoke := func(tenant, principal string) {
		t.Helper()
		if err := fx.f.store.HSet(ctx, fx.f.cfg.Keys.Revoked(), statestore.RevokedField(tenant, principal), []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
			t.Fatal(err)
		}
	}
	refusedSoon := func(who string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := fx.connect(t, fx.tokens[who], "")
			if err != nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s is still let in", who)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	revoke("acme", "bob")
	refusedSoon("bob")
	if _, err := bob.ListTools(ctx, mcp.ListToolsRequest{}); err == nil {
		t.Fatal("bob's open connection still served")
	}
	if _, err := fx.connect(t, fx.tokens["alice"], ""); err != nil {
		t.Fatalf("alice, not revoked: %v", err)
	}
	revoke("acme", "")
	refusedSoon("alice")

	if err := fx.f.store.HDel(context.Background(), fx.f.cfg.Keys.Revoked(), statestore.RevokedField("acme", ""), statestore.RevokedField("acme", "bob")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := fx.connect(t, fx.tokens["alice"], ""); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice still refused after the revocation was lifted")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Revoking a principal cancels the jobs of its calls that the frontend
// still waits for (a queued job is marked cancelled, so no worker runs
// it), and not another principal's.
func TestRevokedPrincipalsJobsCancelled(t *testing.T) {
	t.Parallel()
	fx := startAuthHTTP(t)
	ctx := t.Context()
	alice, err := fx.connect(t, fx.tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := fx.connect(t, fx.tokens["bob"], "")
	if err != nil {
		t.Fatal(err)
	}
	hers, his := fx.pending(t, alice), fx.pending(t, bob)
	watch, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); fx.f.WatchRevocations(watch) }()
	t.Cleanup(func() { stop(); <-done })

	marked := make(chan struct{})
	stopWatch, err := fx.b.WatchCancel(hers, func() { close(marked) })
	if err != nil {
		t.Fatal(err)
	}
	defer stopWatch()
	if err := fx.f.store.HSet(ctx, fx.f.cfg.Keys.Revoked(), statestore.RevokedField("acme", "alice"), []byte("now")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-marked:
	case <-time.After(30 * time.Second):
		t.Fatal("alice's job was not cancelled after her revocation")
	}
	if c, err := fx.b.JobCancelled(ctx, his); err != nil || c {
		t.Fatalf("bob's job cancelled: %v, %v", c, err)
	}
}
