package frontend

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// A collection leaves the workers a notice per workspace it removes,
// naming the workspace's last snapshot, and changes the sequence they
// poll; a dry run leaves none, a workspace in use gets none, and notices
// past their retention are dropped.
func TestCollectTellsTheWorkers(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	keys := statestore.Keys{Prefix: statestore.DefaultPrefix}
	seen := map[string]time.Time{"gc-old": time.Now().Add(-48 * time.Hour), "gc-new": time.Now()}
	for scope, at := range seen {
		owner, _ := json.Marshal(ScopeOwner{Tenant: "acme", Seen: at})
		rec, _ := json.Marshal(wire.Workspace{V: wire.Version, Worker: "w1", Snapshot: "01SNAP" + scope[3:], Stored: true})
		for _, err := range []error{
			st.Set(ctx, keys.ScopeOwner(scope), owner, 0), st.HSet(ctx, keys.ScopeOwners(), scope, []byte("1")),
			st.Set(ctx, keys.Workspace(scope), rec, 0),
		} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	expired, _ := json.Marshal(wire.CollectedWorkspace{V: wire.Version, At: time.Now().Add(-wire.CollectedRetention - time.Hour)})
	if err := st.HSet(ctx, keys.Collected(), "gc-ancient", expired); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-24 * time.Hour)
	if _, err := Collect(ctx, st, keys, cutoff, true); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, keys.CollectedSeq()); !errors.Is(err, statestore.ErrNotFound) {
		t.Errorf("a dry run changed the workers' sequence: %v", err)
	}
	if gone, err := Collect(ctx, st, keys, cutoff, false); err != nil || len(gone) != 1 {
		t.Fatalf("collect: %+v, %v", gone, err)
	}
	seq, err := st.Get(ctx, keys.CollectedSeq())
	if err != nil || len(seq) == 0 {
		t.Errorf("the workers' sequence after a collection: %q, %v", seq, err)
	}
	notices, err := st.HGetAll(ctx, keys.Collected())
	if err != nil {
		t.Fatal(err)
	}
	var n wire.CollectedWorkspace
	if err := json.Unmarshal(notices["gc-old"], &n); err != nil || n.Snapshot != "01SNAPold" || time.Since(n.At) > time.Minute {
		t.Errorf("the notice of the collected workspace: %s, %v", notices["gc-old"], err)
	}
	for _, scope := range []string{"gc-new", "gc-ancient"} {
		if _, ok := notices[scope]; ok {
			t.Errorf("a notice for %s: %s", scope, notices[scope])
		}
	}
}
