package statestore

// Key helpers. Every key codexec writes is built here, so the layout of the
// keyspace is visible in one place and a prefix isolates one deployment (or
// one test) from another.

// Keys builds keys under one prefix (e.g. "codexec:").
type Keys struct{ Prefix string }

// Workers is the presence set of live workers.
func (k Keys) Workers() string { return k.Prefix + "workers" }

// Session is the hash holding one session scope's settings.
func (k Keys) Session(scope string) string { return k.Prefix + "session:" + scope }

// presenceDataKey is the Redis hash that holds the data of presence set set;
// the set itself is a sorted set stored under set. See the package comment.
func presenceDataKey(set string) string { return set + ":data" }
