package frontend

import (
	"context"
	"testing"
)

// ?batch= of a workspace URI names the caller's own batch: its scope is
// the one the batch's jobs run in, another principal's differs, and a
// malformed id is refused.
func TestBatchURIScope(t *testing.T) {
	id := "abcdefghijklmnopqrstuvwxyz234567"
	alice := context.WithValue(context.Background(), identityKey{}, "acme/alice")
	bob := context.WithValue(context.Background(), identityKey{}, "acme/bob")
	got, err := batchURIScope(alice, false, "codexec://workspace/out/0/a.txt?batch="+id+"&offset=0")
	if err != nil || got != batchScope(alice, false, id) {
		t.Fatalf("alice: %q, %v; want her batch's scope %q", got, err, batchScope(alice, false, id))
	}
	if other, _ := batchURIScope(bob, false, "codexec://workspace/out/0/a.txt?batch="+id); other == got {
		t.Errorf("bob's URI resolves to alice's batch scope")
	}
	if s, err := batchURIScope(alice, false, "codexec://workspace/a.txt"); s != "" || err != nil {
		t.Errorf("no batch: %q, %v", s, err)
	}
	for _, bad := range []string{"short", "../../etc", "a%2Fbcdefghijklmnopqrstuvwxyz", ""} {
		if _, err := batchURIScope(alice, false, "codexec://workspace/a.txt?batch="+bad); err == nil {
			t.Errorf("batch=%q accepted", bad)
		}
	}
}
