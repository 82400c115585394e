package sandbox

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// The uids given to sessions: far above those of people and services, and
// below 2^31, which some tools treat as negative.
const (
	DefaultUIDBase  = 2000000000
	DefaultUIDCount = 1 << 24
)

// DefaultUIDDir is where the workers of a host keep the register of the
// uids they gave to sessions: one place per host, whatever each worker's
// data directory, so that two workers on one host never give one uid to two
// sessions.
const DefaultUIDDir = "/var/lib/codexec/uids"

// UIDs hands out one uid per session, for good, unique on the host: a
// session's uid is the owner of its working directory, and a new session
// takes the next uid of a counter that every worker of the host shares.
// Two sessions never share a uid, so that uid checks keep them apart
// (files, signals, /proc, keyrings), and per-uid limits (RLIMIT_NPROC)
// count one session's processes only.
//
// The register is a directory (DefaultUIDDir, or one per test): "next", the
// counter; one file per uid given, named by the uid, that holds the path of
// the working directory it was given to; "lock", flocked while either
// changes. A working directory that already has one of our uids keeps it
// when the register gives it to that directory or to none (a directory made
// before there was a register, whose uid the register then records); when
// the register gives it to another directory that still has it (two
// workers, each with a counter of its own, gave it to two sessions), the
// directory gets a new uid and everything in it that had the old one.
type UIDs struct {
	dir         string
	base, count int
	mu          sync.Mutex
	known       map[string]int // working directory -> its uid, checked against the register
}

// NewUIDs returns the allocator whose register is the directory dir, made
// (0700) when first needed.
func NewUIDs(dir string) *UIDs {
	return &UIDs{dir: dir, base: DefaultUIDBase, count: DefaultUIDCount, known: map[string]int{}}
}

// Owns reports whether uid is one of the allocator's.
func (u *UIDs) Owns(uid int) bool { return uid >= u.base && uid < u.base+u.count }

// Dir makes sure dir exists, is a real directory (not a link) with mode
// mode and belongs to a uid of its own on the host, and returns that uid.
// When it exists already with one of our uids that no other directory
// holds, that one is kept. Once a directory's uid is checked against the
// register, Dir costs a stat (it is on every job's path).
func (u *UIDs) Dir(dir string, mode os.FileMode) (int, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return 0, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return 0, fmt.Errorf("sandbox: %s is not a directory", dir)
	}
	uid := int(st.Uid)
	if known, ok := u.known[dir]; !ok || known != uid {
		if uid, err = u.register(dir, uid); err != nil {
			return 0, err
		}
		if err := unix.Lstat(dir, &st); err != nil {
			return 0, err
		}
	}
	if err := own(dir, &st, uid, mode); err != nil {
		return 0, err
	}
	u.known[dir] = uid
	return uid, nil
}

// register returns the uid that dir, now owned by has, must have: has when
// the register gives it to dir or to no directory that still holds it,
// otherwise a new one, given to dir and to everything in it that had has.
func (u *UIDs) register(dir string, has int) (int, error) {
	reg, err := u.lock()
	if err != nil {
		return 0, err
	}
	defer reg.Close()
	if u.Owns(has) {
		holder, err := u.holder(has)
		if err != nil {
			return 0, err
		}
		if holder == dir || !holds(holder, has) {
			return has, u.record(has, dir)
		}
	}
	uid, err := u.next(dir)
	if err != nil {
		return 0, err
	}
	if u.Owns(has) {
		if err := chownTree(dir, has, uid); err != nil {
			return 0, fmt.Errorf("sandbox: giving %s uid %d instead of %d, which another session has: %w", dir, uid, has, err)
		}
	}
	return uid, nil
}

// lock makes the register and takes its lock, held until the returned
// file is closed.
func (u *UIDs) lock() (*os.File, error) {
	if err := os.MkdirAll(u.dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: uid register: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(u.dir, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sandbox: uid register: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: uid register: %w", err)
	}
	return f, nil
}

// holder is the directory the register gives uid to, "" for none.
func (u *UIDs) holder(uid int) (string, error) {
	data, err := readFile(filepath.Join(u.dir, strconv.Itoa(uid)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(data), err
}

// record gives uid to dir in the register (the lock held).
func (u *UIDs) record(uid int, dir string) error {
	if holder, err := u.holder(uid); err != nil || holder == dir {
		return err
	}
	return writeFile(filepath.Join(u.dir, strconv.Itoa(uid)), dir+"\n")
}

// holds reports whether dir is still a directory owned by uid.
func holds(dir string, uid int) bool {
	var st unix.Stat_t
	return dir != "" && unix.Lstat(dir, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && int(st.Uid) == uid
}

// next takes the next uid from the host's counter and gives it to dir (the
// lock held), passing over uids the register already gives to a directory.
func (u *UIDs) next(dir string) (int, error) {
	counter := filepath.Join(u.dir, "next")
	data, err := readFile(counter)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("sandbox: uid counter: %w", err)
	}
	n := 0
	if s := strings.TrimSpace(data); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 0 {
			return 0, fmt.Errorf("sandbox: uid counter %s: %q is not a count", counter, s)
		}
	}
	for ; n < u.count; n++ {
		holder, err := u.holder(u.base + n)
		if err != nil {
			return 0, err
		}
		if holder == "" {
			break
		}
	}
	if n >= u.count {
		return 0, fmt.Errorf("sandbox: all %d session uids are taken", u.count)
	}
	// The counter first: a uid handed out is never handed out again, even
	// if recording it fails.
	if err := writeFile(counter, strconv.Itoa(n+1)+"\n"); err != nil {
		return 0, err
	}
	return u.base + n, u.record(u.base+n, dir)
}

// chownTree gives everything under dir (dir included) that belongs to uid
// from to uid to, and its group too where the group was from's; links are
// changed, never followed. The walk and each change go through an os.Root
// of dir: a name is resolved below dir, one component at a time, so that a
// directory of the tree replaced by a link to a host path while the walk
// runs (the session's processes own the tree) cannot make the worker, as
// root, give a host file to the session's uid.
func chownTree(dir string, from, to int) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := root.Lstat(path)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || (int(st.Uid) != from && int(st.Gid) != from) {
			return nil
		}
		uid, gid := int(st.Uid), int(st.Gid)
		if uid == from {
			uid = to
		}
		if gid == from {
			gid = to
		}
		return root.Lchown(path, uid, gid)
	})
}

// readFile reads a file of the register, not through a link.
func readFile(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, 64<<10))
	return string(data), err
}

// writeFile replaces a file of the register with data, durably: a new file
// renamed over it, so that a crash leaves the old content or the new.
func writeFile(path, data string) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Own gives the directory dir to uid and its group, with mode. A link or
// anything else that is not a directory is refused.
func Own(dir string, uid int, mode os.FileMode) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return err
	}
	return own(dir, &st, uid, mode)
}

// own is Own of a directory already stat'ed: it changes nothing (and
// costs nothing more, on every job's path) when dir is as it should be.
func own(dir string, st *unix.Stat_t, uid int, mode os.FileMode) error {
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("sandbox: %s is not a directory", dir)
	}
	if int(st.Uid) == uid && int(st.Gid) == uid && os.FileMode(st.Mode&0o7777) == mode {
		return nil
	}
	if err := os.Lchown(dir, uid, uid); err != nil {
		return err
	}
	// chmod follows links; dir was just seen to be a directory, and only
	// root writes its parent.
	return os.Chmod(dir, mode)
}
