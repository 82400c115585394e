//go:build linux

package runner

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountClones: a bind's mount clone is its directory's, with nosuid,
// nodev and, unless the bind writes, read-only set; nothing else gets one:
// a link in the bind's place, a file, a path outside the hidden roots or
// not in its clean form.
func TestMountClones(t *testing.T) {
	if !mountClonesWork() {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root on Linux 5.12 or later: mount clones must work")
		}
		t.Skip("this process cannot make mount clones (root and Linux 5.12 needed)")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "s")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	hidden := []string{root}
	for _, write := range []bool{true, false} {
		fds, err := mountClones([]Bind{{Path: dir, Write: write}}, hidden)
		if err != nil {
			t.Fatal(err)
		}
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fds[0], &fs); err != nil {
			t.Fatal(err)
		}
		want := int64(unix.ST_NOSUID | unix.ST_NODEV)
		if !write {
			want |= unix.ST_RDONLY
		}
		if got := fs.Flags & int64(unix.ST_NOSUID|unix.ST_NODEV|unix.ST_RDONLY); got != want {
			t.Errorf("write %v: the clone's flags are %#x, want %#x", write, got, want)
		}
		if _, err := unix.Openat(fds[0], "f", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
			t.Errorf("the clone does not hold the directory's file: %v", err)
		}
		closeFDs(fds)
	}
	for _, bad := range []string{
		filepath.Join(root, "link"), filepath.Join(dir, "f"), "/etc", dir + "/", root + "/s/../s", root,
	} {
		if fds, err := mountClones([]Bind{{Path: dir}, {Path: bad}}, hidden); err == nil {
			closeFDs(fds)
			t.Errorf("a mount clone of %s", bad)
		}
	}
}

// TestMountClonesArePrivate: the sessions' root is a shared mount, and a
// clone of a shared mount is made its peer: what was mounted under either
// would reach the other. A clone is private.
func TestMountClonesArePrivate(t *testing.T) {
	if !mountClonesWork() {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root on Linux 5.12 or later: mount clones must work")
		}
		t.Skip("this process cannot make mount clones (root and Linux 5.12 needed)")
	}
	root := t.TempDir()
	if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(root, unix.MNT_DETACH) })
	if err := unix.Mount("", root, "", unix.MS_SHARED, ""); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "s")
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	fds, err := mountClones([]Bind{{Path: dir, Write: true}}, []string{root})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFDs(fds)
	at := t.TempDir()
	if err := unix.MoveMount(fds[0], "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(at, unix.MNT_DETACH) })
	// Mounted under the original after the clone was attached.
	if err := unix.Mount("tmpfs", filepath.Join(dir, "sub"), "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(dir, "sub"), unix.MNT_DETACH) })
	var under, clone unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "sub"), &under); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(filepath.Join(at, "sub"), &clone); err != nil {
		t.Fatal(err)
	}
	if clone.Dev == under.Dev {
		t.Error("a mount made under the original reached its clone: they are peers")
	}
}

// TestZygoteShowsNoSessionWhereJobsGetClones: where its jobs get mount
// clones, the zygote takes the hidden roots out of its own view when it
// starts, so that no spare's mount namespace, a copy of the zygote's, is
// made with every session's mounts in it (to be copied, and unmounted,
// once per job). Without clones the roots stay: the spares bind from them.
func TestZygoteShowsNoSessionWhereJobsGetClones(t *testing.T) {
	for _, clones := range []bool{true, false} {
		t.Run(fmt.Sprintf("clones=%v", clones), func(t *testing.T) {
			l := newSandboxLayout(t)
			l.cfg.noClones = !clones
			if clones && !mountClonesWork() {
				t.Skip("this process cannot make mount clones")
			}
			z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
			checkProbe(t, zrun(t, z, l.spec(t, "a", testUIDA, probeJob)), filepath.Join(l.sessions, "a"), testUIDA)
			data, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", z.Info().PID))
			if err != nil {
				t.Fatal(err)
			}
			var roots []string
			for line := range strings.SplitSeq(string(data), "\n") {
				if f := strings.Fields(line); len(f) > 4 && (f[4] == l.sessions || f[4] == l.scripts) {
					roots = append(roots, f[4])
				}
			}
			if clones && len(roots) != 0 {
				t.Errorf("the zygote's mount table holds the hidden roots %v", roots)
			}
			if !clones && len(roots) != 2 {
				t.Errorf("the zygote's mount table holds the hidden roots %v, want both (its spares bind from them)", roots)
			}
		})
	}
}
