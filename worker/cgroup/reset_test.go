package cgroup

import "testing"

// ResetFound says whether the group still held processes (which it
// killed): a pool that read the group's counters once it was emptied reads
// them again then.
func TestResetFoundSaysWhetherItKilled(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{})
	if found, err := g.ResetFound(Limits{Pids: 8}); err != nil || found {
		t.Fatalf("ResetFound of an empty group = %v, %v; want false", found, err)
	}
	startIn(t, g, "/bin/sleep", "30")
	waitProcs(t, g, 1)
	if found, err := g.ResetFound(Limits{Pids: 8}); err != nil || !found {
		t.Fatalf("ResetFound of a group with a process = %v, %v; want true", found, err)
	}
	if pids, err := g.l.procs(); err != nil || len(pids) != 0 {
		t.Fatalf("after ResetFound the group holds %v (%v)", pids, err)
	}
}
