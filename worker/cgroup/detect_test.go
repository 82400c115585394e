package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Hybrid: v1 controllers and a cgroup2 mount without any (this is the
// layout of the machine the package was written on).
const hybridMountinfo = `23 1 253:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridCgroup = `9:name=systemd:/
8:pids:/
4:memory:/process_api/8424
2:cpu,cpuacct:/
0::/
`

func TestOwnDir(t *testing.T) {
	for _, tc := range []struct {
		name, mountinfo, cgroup, ctrl string
		want                          string // "" for not found
	}{
		{"v1 memory", hybridMountinfo, hybridCgroup, "memory", "/sys/fs/cgroup/memory/process_api/8424"},
		{"v1 pids", hybridMountinfo, hybridCgroup, "pids", "/sys/fs/cgroup/pids"},
		{"v1 co-mounted", hybridMountinfo, hybridCgroup, "cpuacct", "/sys/fs/cgroup/cpu,cpuacct"},
		{"v1 missing", hybridMountinfo, hybridCgroup, "freezer", ""},
		{"hybrid v2", hybridMountinfo, hybridCgroup, "", "/sys/fs/cgroup/unified"},
		{"v2 host", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n",
			"0::/system.slice/codexec.service\n", "", "/sys/fs/cgroup/system.slice/codexec.service"},
		{"v2 subtree mounted", "30 23 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			"0::/docker/abc/w\n", "", "/sys/fs/cgroup/w"},
		{"v2 mount root itself", "30 23 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			"0::/docker/abc\n", "", "/sys/fs/cgroup"},
		{"v2 sibling not shown", "30 23 0:26 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n",
			"0::/docker/abcd\n", "", ""},
		{"v2 outside the namespace", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
			"0::/../../user.slice\n", "", ""},
		{"escaped mount point", `30 23 0:26 / /mnt/cg\040v2 rw - cgroup2 cgroup2 rw` + "\n",
			"0::/a\n", "", "/mnt/cg v2/a"},
		{"v2 without mount", hybridMountinfo[:strings.Index(hybridMountinfo, "41 ")], hybridCgroup, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mounts, err := parseMountinfo(strings.NewReader(tc.mountinfo))
			if err != nil {
				t.Fatal(err)
			}
			members, err := parseMemberships(strings.NewReader(tc.cgroup))
			if err != nil {
				t.Fatal(err)
			}
			got, ok := ownDir(mounts, members, tc.ctrl)
			if ok != (tc.want != "") || got != tc.want {
				t.Errorf("ownDir(%q) = %q, %v; want %q", tc.ctrl, got, ok, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := parseMountinfo(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("parseMountinfo accepted a malformed line")
	}
	if _, err := parseMemberships(strings.NewReader("garbage\n")); err == nil {
		t.Error("parseMemberships accepted a malformed line")
	}
}

// A worker killed with SIGKILL cannot remove its groups. The next worker
// to start removes those of workers that are gone (named <id>.<pid>, the
// pid no process), when they are empty; it kills nothing, and leaves the
// groups of live workers and anything else in codexec/ alone.
func TestDetectRemovesTheEmptyGroupsOfDeadWorkers(t *testing.T) {
	m := newManager(t)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := gone.Process.Pid
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", deadPid)); err == nil {
		t.Skipf("pid %d was taken again at once", deadPid)
	}
	u := uniqueName("w")
	names := map[string]string{
		"dead":  fmt.Sprintf("%s-dead.%d", u, deadPid),
		"busy":  fmt.Sprintf("%s-busy.%d", u, deadPid),
		"live":  fmt.Sprintf("%s-live.%d", u, os.Getpid()),
		"other": u + "-other",
	}
	var shared []string
	for _, d := range m.Dirs() {
		shared = append(shared, filepath.Dir(d))
	}
	for _, s := range shared {
		for _, n := range names {
			if err := os.MkdirAll(filepath.Join(s, n, "job"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(func() {
		for _, s := range shared {
			for _, n := range names {
				_ = syscall.Rmdir(filepath.Join(s, n, "job"))
				_ = syscall.Rmdir(filepath.Join(s, n))
			}
		}
	})
	// A process in the busy group, which nothing may kill.
	sib := func(d string) string {
		if d == "" {
			return ""
		}
		return filepath.Join(filepath.Dir(d), names["busy"], "job")
	}
	busy := layout{version: m.l.version, mem: sib(m.l.mem), pids: sib(m.l.pids), cpu: sib(m.l.cpu)}
	g := &Group{l: busy}
	cmd, _ := startIn(t, g, "sleep", "1000")
	waitProcs(t, g, 1)

	m2, err := Detect(uniqueName("n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close() })
	for _, s := range shared {
		assertGone(t, filepath.Join(s, names["dead"]))
		for _, keep := range []string{"busy", "live", "other"} {
			if _, err := os.Stat(filepath.Join(s, names[keep], "job")); err != nil {
				t.Errorf("the %s worker's group in %s: %v, want it kept", keep, s, err)
			}
		}
	}
	waitProcs(t, g, 1)
	if dead(cmd.Process.Pid) {
		t.Error("the process in a dead worker's group was killed")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// A parent that has a controller but does not enable it for its children
// is asked to (a GPU machine's runtime enabled memory alone); one that
// lacks it is not written to. A fake tree: the kernel's own part (the
// child's cgroup.controllers following) is what a real cgroup2 adds.
func TestEnableInParent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	parent := filepath.Join(root, "process_api")
	base := filepath.Join(parent, "abc")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		filepath.Join(parent, "cgroup.controllers"):     "cpuset cpu io memory hugetlb pids\n",
		filepath.Join(parent, "cgroup.subtree_control"): "",
		filepath.Join(base, "cgroup.controllers"):       "memory\n",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := enableInParent(base, []string{"pids"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); strings.TrimSpace(string(b)) != "+pids" {
		t.Errorf("parent's subtree_control: %q, want +pids", b)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.controllers"), []byte("memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := enableInParent(base, []string{"pids"}); err == nil || !strings.Contains(err.Error(), "lacks them too") {
		t.Errorf("a parent without pids: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(parent, "cgroup.subtree_control")); len(b) != 0 {
		t.Errorf("a parent without pids was written to: %q", b)
	}
}
