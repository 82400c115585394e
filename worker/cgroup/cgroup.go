package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrUnavailable is wrapped by every error Detect returns because this
// machine's cgroups cannot be used (as opposed to an invalid name). The
// caller then falls back to per-process rlimits.
var ErrUnavailable = errors.New("cgroups unavailable")

// Limits are the limits of one group. Zero means no limit for that resource.
type Limits struct {
	// MemoryBytes caps the memory of all the group's processes together:
	// v1 memory.limit_in_bytes and memory.memsw.limit_in_bytes (where the
	// kernel accounts swap), v2 memory.max with memory.swap.max 0, so that
	// swap cannot be used to exceed it. Past it, the kernel's OOM killer
	// kills a process of the group.
	MemoryBytes int64
	// Pids caps processes and threads together (pids.max); a fork or
	// thread creation past it fails with EAGAIN.
	Pids int64
	// TCPBytes caps the buffers of the group's TCP sockets, on v1
	// (memory.kmem.tcp.limit_in_bytes): there, unless it is set, they are
	// counted against no group at all, only against the host's tcp_mem,
	// which every TCP socket of the host shares. Past it the group's
	// sockets send and receive less at once. On v2 they count in
	// MemoryBytes, and this is not written.
	TCPBytes int64
}

// CPU weights every job's group gets where the cpu controller is available
// (Manager.CPU): the same for all, so busy jobs split the CPUs evenly
// however many threads each runs, and a sleeping job costs nothing.
const (
	cpuWeightV2 = "100"  // cpu.weight, the kernel's default
	cpuSharesV1 = "1024" // cpu.shares, the kernel's default
)

// The weights of a group set idle (Group.SetIdle): the least the kernel
// takes, so that the group runs when no other group wants the CPUs.
const (
	cpuWeightIdleV2 = "1"
	cpuSharesIdleV1 = "2"
)

// Usage is what a group's counters say, read after its job.
type Usage struct {
	// OOMKills counts the processes the OOM killer killed in the group. On
	// v1 kernels before Linux 4.13, which do not count them, it is 1 if the
	// group ever hit its memory limit (memory.failcnt) and 0 otherwise.
	OOMKills int64
	// MemoryPeak is the most memory the group used at once, in bytes; 0
	// where the kernel does not record it (v2 before Linux 5.19).
	MemoryPeak int64
	// PidsMaxHits counts the forks and clones refused because of Pids.
	PidsMaxHits int64
}

// Manager creates the groups of one worker's jobs under its parent groups,
// codexec/<name>. Its methods may be called concurrently.
type Manager struct {
	l layout
}

// Group is the cgroup (one per v1 hierarchy, or one v2 cgroup) of one job.
// Its methods may be called concurrently.
type Group struct {
	l    layout
	kept keptFiles // its counter files, open (kept.go)
}

// parentDir is the directory, in the worker's own cgroup, that holds the
// parent groups of every worker of the host that shares that cgroup.
const parentDir = "codexec"

// killTimeout bounds how long Kill and Remove wait for a group to empty.
const killTimeout = 2 * time.Second

// Version returns 1 or 2, the cgroup version in use.
func (m *Manager) Version() int { return m.l.version }

// CPU reports whether jobs' groups also hold the cpu controller, giving
// each job the same CPU weight. Without it (v1 with no cpu hierarchy, v2
// where the worker's parent does not delegate cpu) jobs share the CPUs per
// thread, as any processes do.
func (m *Manager) CPU() bool { return m.l.cpu != "" }

// Dirs returns the parent groups' directories: one per v1 hierarchy used
// (memory, pids, cpu when available), or one on v2. A sandbox binds them read-write so that a
// process inside can join its group (see Group.ProcsFiles).
func (m *Manager) Dirs() []string { return m.l.dirs() }

// New creates the group of job, which must be a token like Detect's name
// and not already in use, and writes its limits.
func (m *Manager) New(job string, l Limits) (*Group, error) {
	if err := checkToken("job", job); err != nil {
		return nil, err
	}
	if l.MemoryBytes < 0 || l.Pids < 0 {
		return nil, fmt.Errorf("cgroup: negative limit in %+v", l)
	}
	g := &Group{l: m.l.child(job)}
	var made []string
	for _, d := range g.l.dirs() {
		if err := os.Mkdir(d, 0o755); err != nil {
			// Only what this call made: an existing group is another job's.
			for _, d := range made {
				_ = rmdir(d)
			}
			return nil, fmt.Errorf("cgroup: create group %q: %w", job, err)
		}
		made = append(made, d)
	}
	if err := g.l.setLimits(l); err != nil {
		return nil, errors.Join(fmt.Errorf("cgroup: limits of %q: %w", job, err), g.Remove())
	}
	g.kept = keepFiles(g.l.counterFiles())
	return g, nil
}

// Reset makes an empty group ready for another job: it kills anything
// left in it and writes l, a zero field lifting that limit. A worker
// reuses groups because creating and removing one (above all a v1 memory
// group) costs more CPU than a small job. Counters (Usage) keep counting:
// compare them with their value at the job's start. found says whether
// the group still held processes, which Reset killed: its counters may
// have moved since it was last emptied.
func (g *Group) Reset(l Limits) (found bool, err error) {
	if l.MemoryBytes < 0 || l.Pids < 0 {
		return false, fmt.Errorf("cgroup: negative limit in %+v", l)
	}
	if found, err = g.killFound(); err != nil {
		return found, err
	}
	return found, g.l.resetLimits(l)
}

// Sub returns u less base, counter by counter (MemoryPeak is u's).
func (u Usage) Sub(base Usage) Usage {
	return Usage{OOMKills: u.OOMKills - base.OOMKills, MemoryPeak: u.MemoryPeak, PidsMaxHits: u.PidsMaxHits - base.PidsMaxHits}
}

// Close kills whatever is left in the worker's groups and removes them and
// the parent groups. Calling it again does nothing.
func (m *Manager) Close() error {
	err := errors.Join(m.l.removeChildren(), m.l.remove())
	// codexec/ is shared with the other workers in the same cgroup: the
	// last one out removes it, the others find it busy.
	for _, d := range m.l.dirs() {
		_ = syscall.Rmdir(filepath.Dir(d))
	}
	return err
}

// ProcsFiles returns the cgroup.procs files of the group, one per
// hierarchy. A process joins the group by writing "0" (itself) into each,
// in this order (the pids controller's first: see joinOrder): unlike its
// pid, "0" means the same process in every pid namespace.
func (g *Group) ProcsFiles() []string {
	var files []string
	for _, d := range g.l.joinOrder() {
		files = append(files, filepath.Join(d, "cgroup.procs"))
	}
	return files
}

// Add moves the process pid, as the worker's pid namespace numbers it, and
// all its threads into the group.
func (g *Group) Add(pid int) error {
	for _, d := range g.l.joinOrder() {
		if err := write(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return fmt.Errorf("cgroup: add %d: %w", pid, err)
		}
	}
	return nil
}

// Usage reads the group's counters, so call it before Remove; a counter
// that cannot be read is 0.
func (g *Group) Usage() Usage { return g.l.usage(g.kept.read) }

// Kill sends SIGKILL to every process in the group, including any forked
// meanwhile, and waits for the group to be empty; it fails if it is not
// empty after a short while.
func (g *Group) Kill() error {
	_, err := g.killFound()
	return err
}

// Tasks returns how many tasks the group holds, as its pids controller
// counts them (pids.current, one small read: a task that exited counts
// until it is reaped), and false where it cannot say (no pids controller).
func (g *Group) Tasks() (int64, bool) {
	if g.l.pids == "" {
		return 0, false
	}
	b, err := g.kept.read(g.l.pids, "pids.current")
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// Held returns the memory the group is still charged for that reclaim
// cannot give back: anonymous and shared memory (memory.stat's anon, or
// rss on v1, and shmem). Read once the group is empty, it is memory that
// its processes made and something outside the group still holds: a
// memfd, a /dev/shm or /tmp file, or a shared mapping whose descriptor a
// job passed to a process of another group before it ended. The kernel
// keeps charging such pages to the group that first touched them, however
// long they live, so a group that holds some would hand them to its next
// job as its own. 0 where it cannot say.
func (g *Group) Held() int64 {
	anon := "anon"
	if g.l.version == 1 {
		anon = "rss"
	}
	// One read of memory.stat for both: each read flushes the kernel's
	// per-CPU counters, and this runs after every job.
	held, _ := readKeyWith(g.kept.read, g.l.mem, "memory.stat", anon, "shmem")
	return held
}

// Kernel returns the kernel memory the group is charged for: its slabs
// (dentries and inodes above all), page tables, kernel stacks, socket
// buffers (v1's memory.kmem.usage_in_bytes; v2's "kernel" in memory.stat,
// or "slab" where the kernel does not say more). Read once the group is
// empty and reclaimed (Reclaim), it is kernel memory that something outside
// the group holds: the inodes of a job's /tmp, which live on with its file
// system for as long as a process of another group holds a descriptor of
// it, passed over a Unix socket. Held does not count it. 0 where it cannot
// say.
func (g *Group) Kernel() int64 {
	if g.l.version == 1 {
		return readIntWith(g.kept.read, g.l.mem, "memory.kmem.usage_in_bytes")
	}
	if n, ok := readKeyWith(g.kept.read, g.l.mem, "memory.stat", "kernel"); ok {
		return n
	}
	n, _ := readKeyWith(g.kept.read, g.l.mem, "memory.stat", "slab")
	return n
}

// Charged returns all the memory the group is charged for: what Held and
// Kernel count and its page cache, one small read (v1's
// memory.usage_in_bytes, which counts kernel memory too, or v2's
// memory.current). The kernel charges ahead in per-CPU batches, so it is
// never less than what the group holds. false where it cannot say.
func (g *Group) Charged() (int64, bool) {
	b, err := g.kept.read(g.l.mem, g.l.chargedFile())
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// Reclaim has the kernel take back what it can of an empty group's memory:
// its page cache and the caches of the kernel (unused dentries and inodes).
// What is left is held by something outside the group. v1 writes
// memory.force_empty, v2 memory.reclaim (Linux 5.19 and later).
func (g *Group) Reclaim() error {
	if g.l.version == 1 {
		return write(g.l.mem, "memory.force_empty", "0")
	}
	cur := readInt(g.l.mem, "memory.current")
	if cur <= 0 {
		return nil
	}
	err := write(g.l.mem, "memory.reclaim", strconv.FormatInt(cur, 10))
	if errors.Is(err, syscall.EAGAIN) {
		return nil // less than asked was reclaimable: what is left is held
	}
	return err
}

// KillFound is Kill, and reports whether the group held processes.
func (g *Group) KillFound() (bool, error) { return g.killFound() }

// Remove kills the group's processes and removes the group. Removing a
// removed group does nothing.
func (g *Group) Remove() error {
	g.kept.close()
	return g.l.remove()
}

// layout says where a group's controllers are. A Manager's layout is its
// parent groups; a Group's, the job's groups inside them.
type layout struct {
	version int
	// mem and pids hold the memory and pids controllers. They are the same
	// directory on v2, and on v1 where one hierarchy holds both.
	mem, pids string
	// cpu holds the cpu controller: mem's directory on v2, its own
	// hierarchy's on v1; "" when it is not available.
	cpu string
}

func (l layout) dirs() []string {
	dirs := []string{l.mem}
	for _, d := range []string{l.pids, l.cpu} {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func (l layout) child(name string) layout {
	c := layout{version: l.version, mem: filepath.Join(l.mem, name), pids: filepath.Join(l.pids, name)}
	if l.cpu != "" {
		c.cpu = filepath.Join(l.cpu, name)
	}
	return c
}

// cpuWeightFile is the group's CPU weight file: cpu.weight, or cpu.shares
// on v1.
func (l layout) cpuWeightFile() string {
	if l.version == 2 {
		return "cpu.weight"
	}
	return "cpu.shares"
}

// setCPUWeight gives the group the weight every job's group has, or, idle,
// the least one. Nothing to do without the cpu controller (Manager.CPU).
func (l layout) setCPUWeight(idle bool) error {
	if l.cpu == "" {
		return nil
	}
	v2, v1 := cpuWeightV2, cpuSharesV1
	if idle {
		v2, v1 = cpuWeightIdleV2, cpuSharesIdleV1
	}
	if l.version == 2 {
		return write(l.cpu, l.cpuWeightFile(), v2)
	}
	return write(l.cpu, l.cpuWeightFile(), v1)
}

// SetIdle gives the group the least CPU weight (idle), or every job's
// weight back: what an idle group's processes run gets only the CPU no
// busy group wants. A group goes back to every job's weight when it is
// reused (Reset).
func (g *Group) SetIdle(idle bool) error { return g.l.setCPUWeight(idle) }

// CPUWeight reads the group's CPU weight (cpu.weight, or cpu.shares on
// v1); "" without the cpu controller.
func (g *Group) CPUWeight() (string, error) {
	if g.l.cpu == "" {
		return "", nil
	}
	b, err := os.ReadFile(filepath.Join(g.l.cpu, g.l.cpuWeightFile()))
	return strings.TrimSpace(string(b)), err
}

func (l layout) setLimits(lim Limits) error {
	if err := l.setCPUWeight(false); err != nil {
		return err
	}
	if lim.MemoryBytes > 0 {
		n := strconv.FormatInt(lim.MemoryBytes, 10)
		if l.version == 2 {
			if err := write(l.mem, "memory.max", n); err != nil {
				return err
			}
			// The file is missing only where the kernel does not account
			// swap at all.
			if err := write(l.mem, "memory.swap.max", "0"); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		} else {
			if err := write(l.mem, "memory.limit_in_bytes", n); err != nil {
				return err
			}
			// memsw counts memory and swap together, so the same limit
			// leaves no room for swap. Kernels booted without swap
			// accounting lack it; there a swappiness of 0 keeps the
			// group's own reclaim from swapping, which is the best left.
			err := write(l.mem, "memory.memsw.limit_in_bytes", n)
			if errors.Is(err, fs.ErrNotExist) {
				err = nil
				_ = write(l.mem, "memory.swappiness", "0")
			}
			if err != nil {
				return err
			}
		}
	}
	if lim.Pids > 0 {
		if err := write(l.pids, "pids.max", strconv.FormatInt(lim.Pids, 10)); err != nil {
			return err
		}
	}
	if lim.TCPBytes > 0 {
		return l.setTCP(strconv.FormatInt(lim.TCPBytes, 10))
	}
	return nil
}

// setTCP writes the v1 limit of the group's TCP buffers (Limits.TCPBytes);
// nothing on v2, or where the kernel has no such file.
func (l layout) setTCP(v string) error {
	if l.version == 2 {
		return nil
	}
	if err := write(l.mem, "memory.kmem.tcp.limit_in_bytes", v); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// resetLimits writes every limit of l, "no limit" for a zero field. On v1
// the memory and memory+swap limits must stay ordered (memsw >= limit):
// memsw is lifted first, then both are written.
func (l layout) resetLimits(lim Limits) error {
	mem, pids := "max", "max"
	if lim.MemoryBytes > 0 {
		mem = strconv.FormatInt(lim.MemoryBytes, 10)
	}
	if lim.Pids > 0 {
		pids = strconv.FormatInt(lim.Pids, 10)
	}
	if l.version == 2 {
		if err := write(l.mem, "memory.max", mem); err != nil {
			return err
		}
	} else {
		if mem == "max" {
			mem = "-1"
		}
		memsw := func(v string) error {
			if err := write(l.mem, "memory.memsw.limit_in_bytes", v); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			return nil
		}
		if err := memsw("-1"); err != nil {
			return err
		}
		if err := write(l.mem, "memory.limit_in_bytes", mem); err != nil {
			return err
		}
		if err := memsw(mem); err != nil {
			return err
		}
	}
	if err := write(l.pids, "pids.max", pids); err != nil {
		return err
	}
	tcp := "-1"
	if lim.TCPBytes > 0 {
		tcp = strconv.FormatInt(lim.TCPBytes, 10)
	}
	return l.setTCP(tcp)
}

// counterFiles are the files usage reads, pids.current (Tasks),
// memory.stat (Held), the memory counter (Charged) and, on v1,
// memory.kmem.usage_in_bytes (Kernel).
func (l layout) counterFiles() []string {
	// memory.stat for Held, after every job.
	files := []string{filepath.Join(l.pids, "pids.events"), filepath.Join(l.pids, "pids.current"), filepath.Join(l.mem, "memory.stat"),
		filepath.Join(l.mem, l.chargedFile())}
	if l.version == 2 {
		return append(files, filepath.Join(l.mem, "memory.events"), filepath.Join(l.mem, "memory.peak"))
	}
	return append(files, filepath.Join(l.mem, "memory.oom_control"), filepath.Join(l.mem, "memory.failcnt"),
		filepath.Join(l.mem, "memory.max_usage_in_bytes"), filepath.Join(l.mem, "memory.kmem.usage_in_bytes"))
}

// chargedFile is the memory controller's counter of everything charged to
// the group: memory.current, or v1's memory.usage_in_bytes.
func (l layout) chargedFile() string {
	if l.version == 2 {
		return "memory.current"
	}
	return "memory.usage_in_bytes"
}

// usage reads the counters with read (a path's content).
func (l layout) usage(read func(dir, file string) ([]byte, error)) Usage {
	var u Usage
	if l.version == 2 {
		u.OOMKills, _ = readKeyWith(read, l.mem, "memory.events", "oom_kill")
		u.MemoryPeak = readIntWith(read, l.mem, "memory.peak")
	} else {
		var ok bool
		if u.OOMKills, ok = readKeyWith(read, l.mem, "memory.oom_control", "oom_kill"); !ok && readIntWith(read, l.mem, "memory.failcnt") > 0 {
			u.OOMKills = 1
		}
		u.MemoryPeak = readIntWith(read, l.mem, "memory.max_usage_in_bytes")
	}
	u.PidsMaxHits, _ = readKeyWith(read, l.pids, "pids.events", "max")
	return u
}

// procs returns the processes in any of l's groups. A group that does not
// exist (any more) has none.
func (l layout) procs() ([]int, error) {
	var pids []int
	seen := map[int]bool{}
	for _, d := range l.dirs() {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids, nil
}

// kill empties l's groups. Neither v1 nor v2 says when a group becomes
// empty in a way that covers both, so it polls, backing off.
func (l layout) kill() error {
	_, err := l.killFound()
	return err
}

// killFound is kill, and reports whether l's groups held processes.
func (l layout) killFound() (found bool, err error) {
	deadline := time.Now().Add(killTimeout)
	pause := time.Millisecond
	for {
		pids, err := l.procs()
		if err != nil {
			return found, fmt.Errorf("cgroup: kill: %w", err)
		}
		if len(pids) == 0 {
			return found, nil
		}
		found = true
		if time.Now().After(deadline) {
			return found, fmt.Errorf("cgroup: kill: processes %v still in %s after %v", pids, l.mem, killTimeout)
		}
		// v2's cgroup.kill (Linux 5.14) reaches every process at once, even
		// one forking meanwhile. Without it, each listed process gets its
		// signal and the next round catches what they forked meanwhile.
		if l.version != 2 || write(l.mem, "cgroup.kill", "1") != nil {
			if err := l.signal(pids); err != nil {
				return found, fmt.Errorf("cgroup: kill: %w", err)
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// remove kills l's processes and removes its groups.
func (l layout) remove() error {
	err := l.kill()
	for _, d := range l.dirs() {
		err = errors.Join(err, rmdir(d))
	}
	return err
}

// removeChildren removes every group inside l's groups.
func (l layout) removeChildren() error {
	names := map[string]bool{}
	for _, d := range l.dirs() {
		entries, err := os.ReadDir(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("cgroup: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	var err error
	for name := range names {
		err = errors.Join(err, l.child(name).remove())
	}
	return err
}

// rmdir removes an empty cgroup; one that does not exist is fine. A process
// that is exiting has already left cgroup.procs but keeps its group busy
// until it is done, so EBUSY is retried for a while.
func rmdir(dir string) error {
	deadline := time.Now().Add(killTimeout)
	for {
		err := syscall.Rmdir(dir)
		switch {
		case err == nil || errors.Is(err, fs.ErrNotExist):
			return nil
		case !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline):
			return fmt.Errorf("cgroup: remove %s: %w", dir, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// write writes value into the control file dir/file. It never creates the
// file: a control file the kernel lacks is fs.ErrNotExist.
func write(dir, file, value string) error {
	f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	return errors.Join(err, f.Close())
}

// readInt reads a file holding one number; 0 if it cannot.
func readInt(dir, file string) int64 {
	return readIntWith(func(dir, file string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, file)) }, dir, file)
}

// readIntWith is readInt through read.
func readIntWith(read func(dir, file string) ([]byte, error), dir, file string) int64 {
	b, err := read(dir, file)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// readKeyWith reads, through read, the value of a key in a file of
// "key value" lines; given several keys, the sum of those found. It
// reports whether any was found.
func readKeyWith(read func(dir, file string) ([]byte, error), dir, file string, keys ...string) (int64, bool) {
	b, err := read(dir, file)
	if err != nil {
		return 0, false
	}
	var sum int64
	found := false
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && slices.Contains(keys, k) {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, false
			}
			sum, found = sum+n, true
		}
	}
	return sum, found
}

// checkToken accepts 1 to 64 of A-Z a-z 0-9 . _ -, but not "." or "..":
// the token names a directory.
func checkToken(what, s string) error {
	ok := len(s) >= 1 && len(s) <= 64 && s != "." && s != ".."
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("cgroup: invalid %s %q: want 1 to 64 of A-Z a-z 0-9 . _ - (not \"..\" or \".\")", what, s)
	}
	return nil
}
