package statestore

import "testing"

// The field format is what `codexec admin revoke` has always written: a
// tenant's revocation covers its principals, a principal's covers only
// that one, and an identity without a tenant is never revoked.
func TestRevocationsMatch(t *testing.T) {
	if f := RevokedField("acme", "bob"); f != `["acme","bob"]` {
		t.Fatalf("RevokedField = %s", f)
	}
	r := Revocations{RevokedField("acme", "bob"): []byte("t1"), RevokedField("corp", ""): []byte("t2"), RevokedField("", ""): []byte("t3")}
	for _, c := range []struct {
		tenant, principal, at string
		revoked               bool
	}{
		{"acme", "bob", "t1", true}, {"acme", "alice", "", false}, {"acme", "", "", false},
		{"corp", "anyone", "t2", true}, {"", "", "", false}, {"other", "bob", "", false},
	} {
		if at, ok := r.Match(c.tenant, c.principal); ok != c.revoked || at != c.at {
			t.Errorf("Match(%q, %q) = %q, %v; want %q, %v", c.tenant, c.principal, at, ok, c.at, c.revoked)
		}
	}
}
