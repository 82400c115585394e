package wire

import (
	"regexp"
	"time"
)

// CollectedWorkspace is the notice that a workspace was collected (its
// state removed from the state store for want of use), the value of the
// state store's hash Keys.Collected under the workspace's scope. Every
// worker that keeps something of that scope (working directory, disk
// image, local record) removes it on reading the notice, unless a job or
// context of the scope ran there since At. Notices are kept for
// CollectedRetention, so that a worker down at the time catches up when
// it starts again.
type CollectedWorkspace struct {
	V  int       `json:"v"`
	At time.Time `json:"at"`
	// Snapshot is the job id of the workspace's last snapshot, if it had
	// one: the object a worker deletes from the snapshots' store.
	Snapshot string `json:"snapshot,omitempty"`
}

// CollectedRetention is how long a collection's notice is kept.
const CollectedRetention = 30 * 24 * time.Hour

var snapshotRe = regexp.MustCompile(`^[0-9A-Za-z]{1,64}$`)

// ValidSnapshot reports whether s can name a workspace's snapshot (a job
// id): nothing that could make its object's name another scope's.
func ValidSnapshot(s string) bool { return snapshotRe.MatchString(s) }
