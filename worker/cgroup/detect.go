package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/codexec/codexec/internal/mountinfo"
)

// workerLeaf is the v2 cgroup, next to codexec/, that Detect moves the
// worker into when its own cgroup must give up its processes.
const workerLeaf = "codexec-worker"

// required are the controllers Detect insists on.
var required = []string{"memory", "pids"}

// Detect finds the memory and pids controllers, on cgroup v2 or else v1,
// and creates the parent groups, codexec/<name>, inside the worker's own
// cgroup (so that the worker's own limits still cover its jobs). name must
// be 1 to 64 of A-Z a-z 0-9 . _ - and unique among the workers of the
// host: groups left in codexec/<name> by an earlier worker of that name
// are killed and removed, and so are the empty groups of workers that died
// without removing theirs (sweepDead).
//
// On v2, if the worker's cgroup holds processes (it holds the worker), it
// cannot enable controllers for its children; Detect then moves the worker
// into codexec-worker, a leaf next to codexec, and fails if other
// processes remain.
//
// An error that says why cgroups are unusable wraps ErrUnavailable.
func Detect(name string) (*Manager, error) {
	if err := checkToken("name", name); err != nil {
		return nil, err
	}
	mounts, members, err := readSelf()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	l, err2 := detectV2(mounts, members, name)
	if err2 != nil {
		var err1 error
		if l, err1 = detectV1(mounts, members, name); err1 != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(err2, err1))
		}
	}
	// What an earlier worker of this name left behind.
	if err := l.removeChildren(); err != nil {
		return nil, err
	}
	l.sweepDead(name)
	return &Manager{l}, nil
}

// sweepDead removes the parent groups that workers left in codexec/ when
// they died without closing them (a SIGKILL): those named <id>.<pid>, as
// workers name theirs, whose pid is no process of this PID namespace (the
// workers that share a cgroup share a host or a container, and with it
// their PID namespace). Their jobs died with their zygotes, so nothing is
// killed: only empty groups are removed, deepest first, and a group the
// kernel finds busy is left as it is. Best effort.
func (l layout) sweepDead(own string) {
	for _, d := range l.dirs() {
		shared := filepath.Dir(d)
		entries, err := os.ReadDir(shared)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() && e.Name() != own && ownerGone(e.Name()) {
				rmdirTree(filepath.Join(shared, e.Name()))
			}
		}
	}
}

// ownerGone says whether name is a worker's parent group, <id>.<pid>,
// whose pid is no process here.
func ownerGone(name string) bool {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return false
	}
	pid, err := strconv.Atoi(name[i+1:])
	if err != nil || pid <= 0 || strconv.Itoa(pid) != name[i+1:] {
		return false
	}
	_, err = os.Stat("/proc/" + name[i+1:])
	return errors.Is(err, fs.ErrNotExist)
}

// rmdirTree removes dir and the groups inside it, deepest first, where
// they hold no process (the kernel refuses rmdir otherwise).
func rmdirTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			rmdirTree(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

func detectV2(mounts []mount, members []membership, name string) (layout, error) {
	own, ok := ownDir(mounts, members, "")
	if !ok {
		return layout{}, errors.New("cgroup v2: no cgroup2 mount shows this process's cgroup")
	}
	base := own
	if filepath.Base(own) == workerLeaf {
		base = filepath.Dir(own) // an earlier Detect moved us already
	}
	return setupV2(base, name, required)
}

// setupV2 makes base/codexec/<name> with ctrls enabled for its children.
func setupV2(base, name string, ctrls []string) (layout, error) {
	b, err := os.ReadFile(filepath.Join(base, "cgroup.controllers"))
	if err != nil {
		return layout{}, fmt.Errorf("cgroup v2: %w", err)
	}
	missing := lacking(b, ctrls)
	if len(missing) > 0 {
		// A parent that has them but does not pass them down (a container
		// runtime that delegates memory alone) can be asked to, where it
		// holds no process itself.
		perr := enableInParent(base, missing)
		if perr == nil {
			if b, err = os.ReadFile(filepath.Join(base, "cgroup.controllers")); err != nil {
				return layout{}, fmt.Errorf("cgroup v2: %w", err)
			}
			missing = lacking(b, ctrls)
		}
		if len(missing) > 0 {
			return layout{}, fmt.Errorf("cgroup v2: the worker's cgroup %s lacks the %s controller(s); its parent must enable them in cgroup.subtree_control (%v)", base, strings.Join(missing, ", "), perr)
		}
	}
	if err := enableBase(base, ctrls); err != nil {
		return layout{}, err
	}
	dir := filepath.Join(base, parentDir, name)
	if err := makeParent(dir, ctrls); err != nil {
		return layout{}, fmt.Errorf("cgroup v2: %w", err)
	}
	l := layout{version: 2, mem: dir, pids: dir}
	if slices.Contains(strings.Fields(string(b)), "cpu") && enableCPUV2(base, dir) == nil {
		l.cpu = dir
	}
	return l, nil
}

// enableCPUV2 enables the cpu controller, which is optional, from base down
// to dir's children (after enableBase, base holds no process).
func enableCPUV2(base, dir string) error {
	for _, d := range []string{base, filepath.Dir(dir), dir} {
		if err := enable(d, []string{"cpu"}); err != nil {
			return err
		}
	}
	return nil
}

// enableBase enables ctrls for the children of base, the worker's cgroup.
// v2 refuses that (EBUSY) while base itself holds processes, unless it is
// the root: the "no internal processes" rule. The worker is such a process,
// so it moves into a leaf and tries again.
func enableBase(base string, ctrls []string) error {
	err := enable(base, ctrls)
	if !errors.Is(err, syscall.EBUSY) {
		if err != nil {
			return fmt.Errorf("cgroup v2: enable %v in %s: %w", ctrls, base, err)
		}
		return nil
	}
	leaf := filepath.Join(base, workerLeaf)
	if err := mkdir(leaf); err != nil {
		return fmt.Errorf("cgroup v2: %w", err)
	}
	if err := write(leaf, "cgroup.procs", strconv.Itoa(os.Getpid())); err != nil {
		return fmt.Errorf("cgroup v2: move the worker into %s: %w", leaf, err)
	}
	if err := enable(base, ctrls); err != nil {
		others, _ := layout{mem: base, pids: base}.procs()
		return fmt.Errorf("cgroup v2: enable %v in %s: %w: v2 allows that only in a cgroup without processes, and it still holds processes other than the worker %v; run the worker in a cgroup of its own", ctrls, base, err, others)
	}
	return nil
}

func detectV1(mounts []mount, members []membership, name string) (layout, error) {
	dirs := map[string]string{}
	var missing []string
	for _, c := range required {
		d, ok := ownDir(mounts, members, c)
		if !ok {
			missing = append(missing, c)
			continue
		}
		dirs[c] = filepath.Join(d, parentDir, name)
	}
	if len(missing) > 0 {
		return layout{}, fmt.Errorf("cgroup v1: no mounted hierarchy for %s", strings.Join(missing, ", "))
	}
	l := layout{version: 1, mem: dirs["memory"], pids: dirs["pids"]}
	for _, d := range l.dirs() {
		if err := makeParent(d, nil); err != nil {
			return layout{}, errors.Join(fmt.Errorf("cgroup v1: %w", err), l.remove())
		}
	}
	for _, f := range []string{filepath.Join(l.mem, "memory.limit_in_bytes"), filepath.Join(l.pids, "pids.max")} {
		if _, err := os.Stat(f); err != nil {
			return layout{}, errors.Join(fmt.Errorf("cgroup v1: %w", err), l.remove())
		}
	}
	// The cpu controller is optional: without it jobs share the CPUs per
	// thread.
	if d, ok := ownDir(mounts, members, "cpu"); ok {
		cpu := filepath.Join(d, parentDir, name)
		if err := makeParent(cpu, nil); err == nil {
			if _, err := os.Stat(filepath.Join(cpu, "cpu.shares")); err == nil {
				l.cpu = cpu
			} else {
				_ = rmdir(cpu)
			}
		}
	}
	return l, nil
}

// makeParent creates dir, <worker's cgroup>/codexec/<name>, and on v2
// enables ctrls in codexec and in dir. Another worker's Close may remove
// codexec while it is empty, between our making it and making dir in it:
// that shows as ErrNotExist, and another try makes it again.
func makeParent(dir string, ctrls []string) error {
	var err error
	for range 3 {
		shared := filepath.Dir(dir)
		err = mkdir(shared)
		if err == nil {
			err = enable(shared, ctrls)
		}
		if err == nil {
			err = mkdir(dir)
		}
		if err == nil {
			err = enable(dir, ctrls)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return err
}

// lacking is those of ctrls that the cgroup.controllers content b lacks.
func lacking(b []byte, ctrls []string) []string {
	var missing []string
	for _, c := range ctrls {
		if !slices.Contains(strings.Fields(string(b)), c) {
			missing = append(missing, c)
		}
	}
	return missing
}

// enableInParent enables ctrls in the cgroup.subtree_control of base's
// parent, which must have them itself (in its cgroup.controllers): seen on
// a GPU machine whose runtime gave each process group a cgroup under one
// that enabled memory alone for its children, though it had pids too.
func enableInParent(base string, ctrls []string) error {
	parent := filepath.Dir(base)
	if parent == base || !strings.HasPrefix(parent, "/") {
		return fmt.Errorf("%s has no parent cgroup", base)
	}
	b, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil {
		return err
	}
	if m := lacking(b, ctrls); len(m) > 0 {
		return fmt.Errorf("its parent %s lacks them too (%s)", parent, strings.Join(m, ", "))
	}
	if err := enable(parent, ctrls); err != nil {
		return fmt.Errorf("enable %v in %s: %w", ctrls, parent, err)
	}
	return nil
}

// mkdir makes a cgroup unless it exists.
func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// enable makes ctrls available to dir's children (v2).
func enable(dir string, ctrls []string) error {
	if len(ctrls) == 0 {
		return nil
	}
	return write(dir, "cgroup.subtree_control", "+"+strings.Join(ctrls, " +"))
}

// mount is one line of /proc/self/mountinfo.
type mount struct {
	root   string   // the directory of the filesystem shown at point
	point  string   // where it is mounted
	fstype string   // "cgroup" (v1) or "cgroup2"
	opts   []string // super options: a v1 hierarchy's controllers
}

// membership is one line of /proc/self/cgroup: this process's cgroup in one
// hierarchy. The v2 hierarchy has id 0 and no controllers.
type membership struct {
	id          string
	controllers []string
	path        string
}

func readSelf() ([]mount, []membership, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return nil, nil, err
	}
	g, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, nil, err
	}
	defer g.Close()
	members, err := parseMemberships(g)
	return mounts, members, err
}

// parseMountinfo keeps the cgroup mounts of a mountinfo file (proc(5)):
// "id parent major:minor root point options [optional...] - fstype source superoptions".
func parseMountinfo(r io.Reader) ([]mount, error) {
	var mounts []mount
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+4 {
			return nil, fmt.Errorf("mountinfo: malformed line %q", sc.Text())
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		mounts = append(mounts, mount{
			root:   mountinfo.Unescape(fields[3]),
			point:  mountinfo.Unescape(fields[4]),
			fstype: fstype,
			opts:   strings.Split(fields[sep+3], ","),
		})
	}
	return mounts, sc.Err()
}

// parseMemberships parses /proc/self/cgroup: "id:controllers:path" lines.
func parseMemberships(r io.Reader) ([]membership, error) {
	var ms []membership
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("/proc/self/cgroup: malformed line %q", sc.Text())
		}
		m := membership{id: parts[0], path: parts[2]}
		if parts[1] != "" {
			m.controllers = strings.Split(parts[1], ",")
		}
		ms = append(ms, m)
	}
	return ms, sc.Err()
}

// ownDir returns the directory of this process's cgroup in the v1
// hierarchy of controller ctrl, or in the v2 hierarchy when ctrl is "".
func ownDir(mounts []mount, members []membership, ctrl string) (string, bool) {
	for _, m := range members {
		v2 := m.id == "0" && len(m.controllers) == 0
		if ctrl == "" && !v2 || ctrl != "" && !slices.Contains(m.controllers, ctrl) {
			continue
		}
		for _, mt := range mounts {
			if ctrl == "" && mt.fstype != "cgroup2" || ctrl != "" && (mt.fstype != "cgroup" || !slices.Contains(mt.opts, ctrl)) {
				continue
			}
			if d, ok := dirIn(mt, m.path); ok {
				return d, true
			}
		}
	}
	return "", false
}

// dirIn returns where the cgroup path, as /proc/self/cgroup names it,
// appears under the mount mt, if mt shows it: a mount may show only a
// subtree (its root), and a cgroup outside this process's cgroup namespace
// has a path with "..", which no mount shows.
func dirIn(mt mount, path string) (string, bool) {
	if !strings.HasPrefix(path, "/") || slices.Contains(strings.Split(path, "/"), "..") {
		return "", false
	}
	rel := path
	if mt.root != "/" {
		var ok bool
		if rel, ok = strings.CutPrefix(path, mt.root); !ok || rel != "" && rel[0] != '/' {
			return "", false
		}
	}
	return filepath.Join(mt.point, rel), true
}
