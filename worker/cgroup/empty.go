package cgroup

import "slices"

// joinOrder is l's directories in the order a process joins them (Add,
// ProcsFiles): the pids controller's first. A live process in any of the
// group's controllers has then joined its pids controller before (a
// process is moved into the others only after it, and what it forks
// starts in all of its groups), so pids.current counts it: a group whose
// pids.current is 0 holds no process in any controller (Group.killFound).
func (l layout) joinOrder() []string {
	dirs := l.dirs()
	if i := slices.Index(dirs, l.pids); i > 0 {
		dirs = append([]string{l.pids}, slices.Delete(dirs, i, i+1)...)
	}
	return dirs
}

// killFound is the layout's killFound, except that a group whose pids
// controller counts no task (one read of a kept file) is empty without
// more (joinOrder says why): reading every controller's cgroup.procs, as
// the worker did for each job on its way in and again on its way out,
// cost it 3 to 5% of its CPU with 8 sandboxed callers. A task that exited
// and is not yet reaped still counts, and sends it the long way.
func (g *Group) killFound() (bool, error) {
	if n, ok := g.Tasks(); ok && n == 0 {
		return false, nil
	}
	return g.l.killFound()
}
