package codefiles

import "github.com/codexec/codexec/statestore"

// ForTenant returns a CodeStore like cs whose code-file writes and deletes
// also charge q, the counter of the bytes every code file of the session's
// tenant takes, in the same atomic step as the session's own budget: a
// write that would take q past q.Limit (> 0) writes nothing and fails with
// ErrTenantFull. q.Limit <= 0 counts without limiting. The code of
// recorded runs is not charged to q: the session's budget and RunRetention
// bound it.
func (cs *CodeStore) ForTenant(q statestore.Quota) *CodeStore {
	c := *cs
	c.tenant = statestore.Quota{Key: q.Key, Limit: q.Limit}
	return &c
}
