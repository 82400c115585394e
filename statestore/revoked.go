package statestore

import "encoding/json"

// RevokedField is the field of Keys.Revoked that revokes principal of
// tenant, or, with principal "", the whole tenant: the JSON array
// [tenant, principal].
func RevokedField(tenant, principal string) string {
	f, _ := json.Marshal([]string{tenant, principal})
	return string(f)
}

// Revocations is the hash Keys.Revoked as read (HGetAll): field
// RevokedField, value when.
type Revocations map[string][]byte

// Match says whether principal of tenant is revoked, by a revocation of
// the tenant or of that principal, and since when. An identity without a
// tenant (no authentication) is never revoked.
func (r Revocations) Match(tenant, principal string) (string, bool) {
	if tenant == "" {
		return "", false
	}
	for _, field := range []string{RevokedField(tenant, ""), RevokedField(tenant, principal)} {
		if at, ok := r[field]; ok {
			return string(at), true
		}
	}
	return "", false
}
