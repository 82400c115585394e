package frontend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// What a collection tells the workers. The state store holds the notices
// (Keys.Collected), not a NATS subject: the collector may be `codexec admin
// gc`, which reaches the state store only; a worker that was down during
// the collection reads every notice when it starts again (a broadcast
// would have been lost to it); and the store is where a workspace's state
// lives, as the revocations do (revoke.go). Workers poll Keys.CollectedSeq,
// one small read, and read the hash when it changed (worker/collect.go).

// noteCollected records the notice that scope is collected, naming its
// last snapshot, whose object the workers delete.
func noteCollected(ctx context.Context, st statestore.Store, keys statestore.Keys, scope string) error {
	n := wire.CollectedWorkspace{V: wire.Version, At: time.Now().UTC()}
	data, err := st.Get(ctx, keys.Workspace(scope))
	switch {
	case err == nil:
		var rec wire.Workspace
		if json.Unmarshal(data, &rec) == nil && wire.ValidSnapshot(rec.Snapshot) {
			n.Snapshot = rec.Snapshot
		}
	case !errors.Is(err, statestore.ErrNotFound):
		return fmt.Errorf("read workspace %s: %w", scope, err)
	}
	data, _ = json.Marshal(n)
	if err := st.HSet(ctx, keys.Collected(), scope, data); err != nil {
		return fmt.Errorf("note workspace %s collected: %w", scope, err)
	}
	return nil
}

// announceCollected, after a collection that noted n workspaces (or
// none), changes Keys.CollectedSeq so that workers read the notices, and
// drops the notices older than wire.CollectedRetention.
func announceCollected(ctx context.Context, st statestore.Store, keys statestore.Keys, n int) error {
	if n > 0 {
		if err := st.Set(ctx, keys.CollectedSeq(), []byte(ulid.Make().String()), 0); err != nil {
			return fmt.Errorf("tell the workers of the collection: %w", err)
		}
	}
	notices, err := st.HGetAll(ctx, keys.Collected())
	if err != nil {
		return fmt.Errorf("read the collections' notices: %w", err)
	}
	var old []string
	for scope, data := range notices {
		var c wire.CollectedWorkspace
		if json.Unmarshal(data, &c) != nil || time.Since(c.At) > wire.CollectedRetention {
			old = append(old, scope)
		}
	}
	if len(old) == 0 {
		return nil
	}
	return st.HDel(ctx, keys.Collected(), old...)
}
