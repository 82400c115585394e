package cgroup

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

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

// openIn lists the descriptors of this process open on files under dir.
func openIn(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range entries {
		if target, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(target, dir+"/") {
			files = append(files, target)
		}
	}
	return files
}

// A group keeps its counter files open from New to Remove, and what it
// reads through them is what the kernel counts now, not what it counted
// at the first read: Tasks follows a process in and out, Usage a refused
// fork. Remove closes them (a pooled group leaks no descriptor) and still
// removes the group.
func TestGroupReadsCountersThroughKeptFiles(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	g, err := m.New(uniqueName("g"), Limits{Pids: 2})
	if err != nil {
		t.Fatal(err)
	}
	kept := openIn(t, g.l.pids)
	if !slices.Contains(kept, filepath.Join(g.l.pids, "pids.current")) || !slices.Contains(kept, filepath.Join(g.l.pids, "pids.events")) {
		t.Fatalf("open under the group: %v; want its pids.current and pids.events", kept)
	}
	if kept := openIn(t, g.l.mem); !slices.Contains(kept, filepath.Join(g.l.mem, "memory.stat")) {
		t.Fatalf("open under the group's memory directory: %v; want its memory.stat", kept)
	}
	for i := range 2 {
		if n, ok := g.Tasks(); !ok || n != 0 {
			t.Fatalf("read %d: Tasks of an empty group = %d, %v", i, n, ok)
		}
	}
	base := g.Usage()
	cmd, _ := startIn(t, g, "/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait")
	deadline := time.Now().Add(10 * time.Second)
	for g.Usage().Sub(base).PidsMaxHits == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no refused fork counted: %+v", g.Usage())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n, ok := g.Tasks(); !ok || n != 2 {
		t.Fatalf("Tasks of a group at its limit of 2 = %d, %v", n, ok)
	}
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if err := g.Remove(); err != nil {
		t.Fatalf("Remove with the counter files open: %v", err)
	}
	assertGone(t, g.l.dirs()...)
	if left := openIn(t, g.l.pids); len(left) != 0 {
		t.Fatalf("still open after Remove: %v", left)
	}
	if n, ok := g.Tasks(); ok {
		t.Fatalf("Tasks of a removed group = %d, true", n)
	}
}
