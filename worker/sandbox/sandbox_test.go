package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestDedupeKeepsWritableUnderReadOnly(t *testing.T) {
	got := dedupe([]Mount{
		{Path: "/data/sessions", Write: true},
		{Path: "/data"},
		{Path: "/data/envs/a"},     // covered by /data (read-only, same access)
		{Path: "/data/sessions/x"}, // covered by the writable /data/sessions
		{Path: "/data/"},
	})
	want := []Mount{{Path: "/data"}, {Path: "/data/sessions", Write: true}}
	if !slices.Equal(got, want) {
		t.Fatalf("dedupe = %v, want %v", got, want)
	}
}

func TestAncestorsParentsFirstWithoutSystemDirs(t *testing.T) {
	got := ancestors([]string{"/root/.pyenv/versions/3.12.1", "/root/data/sessions", "/usr/lib/x", "/srv"})
	want := []string{"/root", "/root/.pyenv", "/root/data", "/root/.pyenv/versions"}
	if !slices.Equal(got, want) {
		t.Fatalf("ancestors = %v, want %v", got, want)
	}
}

func TestArgsShape(t *testing.T) {
	s := &Sandbox{launcher: []string{"/usr/bin/bwrap"}, cfg: Config{ReadOnly: []string{"/srv/data"}}, system: []string{"--ro-bind", "/usr", "/usr"}}
	args := s.Args(Options{Mounts: []Mount{{Path: "/var/lib/codexec/sessions", Write: true}}, Caps: []string{"CAP_KILL"}}, "/usr/bin/python3", "-c", "pass")
	line := strings.Join(args, " ")
	for _, want := range []string{
		"--unshare-pid", "--unshare-net", "--die-with-parent", "--cap-drop ALL --cap-add CAP_KILL",
		"--perms 0755 --dir /var/lib/codexec", "--bind /var/lib/codexec/sessions /var/lib/codexec/sessions",
		"--ro-bind /srv/data /srv/data", "-- /usr/bin/python3 -c pass",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("argv lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(strings.Join(s.Args(Options{Network: true}, "/bin/true"), " "), "--unshare-net") {
		t.Error("a sandbox with network still unshares it")
	}
}

func TestProbeWithoutBwrap(t *testing.T) {
	_, err := Probe(context.Background(), Config{Launcher: LauncherBwrap, Bwrap: "/nonexistent/bwrap"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Probe = %v, want ErrUnavailable", err)
	}
	// The default launcher needs no bubblewrap.
	s, err := Probe(context.Background(), Config{Bwrap: "/nonexistent/bwrap"})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("no namespaces here: %v", err)
	}
	if s.Version() != LauncherBuiltin {
		t.Fatalf("the default launcher is %q, want %q", s.Version(), LauncherBuiltin)
	}
}

func TestInterpreterMountsOfAVenv(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	venv := filepath.Join(dir, "venv")
	for _, d := range []string{filepath.Join(base, "bin"), filepath.Join(venv, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "bin", "python3.12"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(base, "bin", "python3.12"), filepath.Join(venv, "bin", "python")); err != nil {
		t.Fatal(err)
	}
	ms, err := InterpreterMounts(filepath.Join(venv, "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []Mount{{Path: venv}, {Path: base}}; !slices.Equal(ms, want) {
		t.Fatalf("mounts %v, want %v", ms, want)
	}
	if _, err := InterpreterMounts("python3"); err == nil {
		t.Fatal("a relative interpreter was accepted")
	}
}

func TestUIDsOnePerSessionForGood(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving directories away needs root")
	}
	root := t.TempDir()
	u := NewUIDs(filepath.Join(root, ".uids"))
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for _, name := range []string{"a", "b", "c", "a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid, err := u.Dir(filepath.Join(root, name), 0o700)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if prev, ok := got[name]; ok && prev != uid {
				t.Errorf("session %s got uids %d and %d", name, prev, uid)
			}
			got[name] = uid
		}()
	}
	wg.Wait()
	seen := map[int]bool{}
	for name, uid := range got {
		if !u.Owns(uid) || seen[uid] {
			t.Errorf("session %s: uid %d not ours or shared", name, uid)
		}
		seen[uid] = true
		fi, err := os.Stat(filepath.Join(root, name))
		if err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("session %s: %v %v", name, fi.Mode(), err)
		}
	}
	// A new allocator on the same counter (a restarted worker) keeps the
	// uids of existing sessions and never reuses them for new ones.
	u2 := NewUIDs(filepath.Join(root, ".uids"))
	if uid, err := u2.Dir(filepath.Join(root, "a"), 0o700); err != nil || uid != got["a"] {
		t.Fatalf("after a restart session a has uid %d (%v), want %d", uid, err, got["a"])
	}
	if uid, err := u2.Dir(filepath.Join(root, "d"), 0o700); err != nil || seen[uid] {
		t.Fatalf("a new session got uid %d (%v), already taken", uid, err)
	}
	// A link planted where a session directory should be is refused.
	if err := os.Symlink("/etc", filepath.Join(root, "e")); err != nil {
		t.Fatal(err)
	}
	if _, err := u2.Dir(filepath.Join(root, "e"), 0o700); err == nil {
		t.Fatal("a symbolic link was taken for a session directory")
	}
}

// Two workers on one host, with data directories of their own and the
// host's one register, never give one uid to two sessions, even to
// sessions of the same name (every stdio session is "local"), and each
// keeps its uid across a restart. Each worker once counted from the first
// uid in its own data directory, so the first session of each had
// 2000000000.
func TestUIDsUniqueOnTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving directories away needs root")
	}
	host := filepath.Join(t.TempDir(), "uids")
	var roots []string
	for range 2 {
		root := filepath.Join(t.TempDir(), "sessions")
		if err := os.Mkdir(root, 0o711); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, root)
	}
	workers := []*UIDs{NewUIDs(host), NewUIDs(host)}
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for i, u := range workers {
		for _, name := range []string{"local", "a", "b", "local", "a"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dir := filepath.Join(roots[i], name)
				uid, err := u.Dir(dir, 0o700)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if prev, ok := got[dir]; ok && prev != uid {
					t.Errorf("%s got uids %d and %d", dir, prev, uid)
				}
				got[dir] = uid
			}()
		}
	}
	wg.Wait()
	byUID := map[int]string{}
	for dir, uid := range got {
		if other, ok := byUID[uid]; ok || !workers[0].Owns(uid) {
			t.Errorf("uid %d of %s: also %q's, or not ours", uid, dir, other)
		}
		byUID[uid] = dir
	}
	// Restarted workers (new allocators on the same register) keep every
	// session's uid.
	for i := range workers {
		u := NewUIDs(host)
		for _, name := range []string{"local", "a", "b"} {
			dir := filepath.Join(roots[i], name)
			if uid, err := u.Dir(dir, 0o700); err != nil || uid != got[dir] {
				t.Errorf("after a restart %s has uid %d (%v), want %d", dir, uid, err, got[dir])
			}
		}
	}
}

// Sessions that two workers of one host gave the same uid before there was
// a register (each counted in its own data directory) are parted: the first
// directory seen keeps the uid, the other gets a new one, and so does
// everything in it that had the old one (links changed, not followed).
func TestUIDsPartSessionsThatShareAUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving directories away needs root")
	}
	host := filepath.Join(t.TempDir(), "uids")
	shared := DefaultUIDBase
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("not the session's"), 0o600); err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for range 2 {
		dir := filepath.Join(t.TempDir(), "local")
		for _, d := range []string{dir, filepath.Join(dir, "sub")} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(dir, "sub", "data")
		if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(victim, filepath.Join(dir, "link")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, filepath.Join(dir, "sub"), file, filepath.Join(dir, "link")} {
			if err := os.Lchown(p, shared, shared); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, dir)
	}
	first, err := NewUIDs(host).Dir(dirs[0], 0o700)
	if err != nil || first != shared {
		t.Fatalf("the first directory has uid %d (%v), want to keep %d", first, err, shared)
	}
	second, err := NewUIDs(host).Dir(dirs[1], 0o700)
	if err != nil || second == shared || second < DefaultUIDBase {
		t.Fatalf("the second directory has uid %d (%v), want a new one", second, err)
	}
	for _, p := range []string{dirs[1], filepath.Join(dirs[1], "sub"), filepath.Join(dirs[1], "sub", "data"), filepath.Join(dirs[1], "link")} {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil || int(st.Uid) != second || int(st.Gid) != second {
			t.Errorf("%s: owner %d:%d (%v), want %d", p, st.Uid, st.Gid, err, second)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(victim, &st); err != nil || st.Uid != 0 {
		t.Errorf("the file a link pointed to changed owner: %d (%v)", st.Uid, err)
	}
	// A new session never gets either.
	third, err := NewUIDs(host).Dir(filepath.Join(t.TempDir(), "new"), 0o700)
	if err != nil || third == first || third == second {
		t.Fatalf("a new session got uid %d (%v); taken: %d, %d", third, err, first, second)
	}
}

// Own, on every job's path, touches a directory that is already right not
// at all (its ctime stays), and refuses a link.
func TestOwnChangesOnlyWhatIsWrong(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("giving directories away needs root")
	}
	dir := filepath.Join(t.TempDir(), "d")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Own(dir, DefaultUIDBase+7, 0o500); err != nil {
		t.Fatal(err)
	}
	var before, after syscall.Stat_t
	if err := syscall.Stat(dir, &before); err != nil {
		t.Fatal(err)
	}
	if before.Uid != DefaultUIDBase+7 || before.Mode&0o7777 != 0o500 {
		t.Fatalf("owner %d mode %o", before.Uid, before.Mode&0o7777)
	}
	time.Sleep(10 * time.Millisecond) // a ctime change would show
	if err := Own(dir, DefaultUIDBase+7, 0o500); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dir, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ctim != before.Ctim {
		t.Fatal("Own changed a directory that was already right")
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if err := Own(link, DefaultUIDBase+8, 0o700); err == nil {
		t.Fatal("Own followed a link")
	}
}

// The tree chownTree walks is the session's, whose processes may replace
// any directory of it by a link while the walk runs. Walked by path, a
// directory swapped for a link to a host directory between its listing and
// the change of a name below it made the worker, as root, give a host file
// to the session's uid. The walk stays below its directory.
func TestChownTreeStaysBelowItsDirectoryWhileItChanges(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing owners needs root")
	}
	const from, to = DefaultUIDBase + 7, DefaultUIDBase + 8
	host := t.TempDir()
	dir := t.TempDir()
	var names []string
	for i := range 64 {
		names = append(names, fmt.Sprintf("f%02d", i))
	}
	mk := func(d string) {
		for _, n := range names {
			p := filepath.Join(d, n)
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Lchown(p, from, from); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk(host) // the host's files, which happen to have the uid
	// The session's process swaps sub between a directory of its files
	// and a link to the host's directory, each a rename.
	sub, real, link := filepath.Join(dir, "sub"), filepath.Join(dir, ".real"), filepath.Join(dir, ".link")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	mk(real)
	if err := os.Symlink(host, link); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = os.Rename(real, sub)
			_ = os.Rename(sub, real)
			_ = os.Rename(link, sub)
			_ = os.Rename(sub, link)
		}
	})
	for range 2000 {
		_ = chownTree(dir, from, to) // errors: a name gone mid-walk
		_ = chownTree(real, to, from)
	}
	close(stop)
	wg.Wait()
	for _, n := range names {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(host, n), &st); err != nil || int(st.Uid) != from {
			t.Fatalf("a host file's owner changed to %d (%v) through a directory swapped for a link", st.Uid, err)
		}
	}
}
