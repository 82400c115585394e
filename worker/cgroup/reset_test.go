package cgroup

import "testing"

// Reset says whether the group still held processes (which it
// killed): a pool that read the group's counters once it was emptied reads
// them again then.
func TestResetSaysWhetherItKilled(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{})
	if found, err := g.Reset(Limits{Pids: 8}); err != nil || found {
		t.Fatalf("Reset of an empty group = %v, %v; want false", found, err)
	}
	startIn(t, g, "/bin/sleep", "30")
	waitProcs(t, g, 1)
	if found, err := g.Reset(Limits{Pids: 8}); err != nil || !found {
		t.Fatalf("Reset of a group with a process = %v, %v; want true", found, err)
	}
	if pids, err := g.l.procs(); err != nil || len(pids) != 0 {
		t.Fatalf("after Reset the group holds %v (%v)", pids, err)
	}
}

// Tasks counts the group's tasks from its pids controller: none in a new
// group, one with a process in it, still one once it is killed and not yet
// reaped, none once it is reaped.
func TestTasksCountsTheGroupsTasks(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g := newGroup(t, m, Limits{})
	if n, ok := g.Tasks(); !ok || n != 0 {
		t.Fatalf("Tasks of an empty group = %d, %v; want 0, true", n, ok)
	}
	cmd, _ := startIn(t, g, "/bin/sleep", "30")
	waitProcs(t, g, 1)
	if n, ok := g.Tasks(); !ok || n != 1 {
		t.Fatalf("Tasks of a group with a sleep = %d, %v; want 1, true", n, ok)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	if n, ok := g.Tasks(); !ok || n != 1 {
		t.Fatalf("Tasks of a group whose process is killed but not reaped = %d, %v; want 1, true", n, ok)
	}
	_ = cmd.Wait()
	if n, ok := g.Tasks(); !ok || n != 0 {
		t.Fatalf("Tasks of a group whose process is reaped = %d, %v; want 0, true", n, ok)
	}
}
