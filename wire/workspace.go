package wire

import "time"

// Workspace is the state store's record of where a session's working
// directory is (statestore.Keys.Workspace): the worker that last ran one of
// the session's jobs, which the frontend sends the session's next job to
// while it is alive, and the snapshot of the directory that any other
// worker restores first.
type Workspace struct {
	V int `json:"v"`
	// Worker is the id of the worker holding the directory.
	Worker string `json:"worker"`
	// Snapshot is the id of the job after which the directory was last
	// saved ("" before any was), the generation of the session's files: a
	// worker whose own copy is of another snapshot restores this one.
	Snapshot string `json:"snapshot,omitempty"`
	// Stored says that the snapshot is in the workspaces object store; a
	// snapshot that could not be stored (larger than the session's disk
	// limit, the store unreachable) exists only on Worker.
	Stored bool `json:"stored,omitempty"`
	// SavedAt is when the snapshot was stored: the store keeps it for a
	// limited time, so a session that goes on without changing its files
	// has it stored again now and then.
	SavedAt time.Time `json:"saved_at,omitzero"`
}
