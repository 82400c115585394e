package statestore

// Collected is the hash of the workspaces collected (frontend/gc.go):
// field the scope, value a wire.CollectedWorkspace. Workers read it to
// remove what they keep of those workspaces (worker/collect.go).
func (k Keys) Collected() string { return k.Prefix + "collected" }

// CollectedSeq is the string that changes whenever Collected gains a
// notice, so that a worker reads the whole hash only when it changed.
func (k Keys) CollectedSeq() string { return k.Prefix + "collectedseq" }
