package sandbox

import (
	"errors"
	"fmt"
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

// UIDs hands out one uid per session, for good: a session's uid is the
// owner of its working directory, and a new session takes the next uid of
// a counter kept in a file. Two sessions never share a uid, so that uid
// checks keep them apart (files, signals, /proc), and per-uid limits
// (RLIMIT_NPROC) count one session's processes only.
type UIDs struct {
	counter     string
	base, count int
	mu          sync.Mutex
}

// NewUIDs returns the allocator whose counter is the file counter.
func NewUIDs(counter string) *UIDs {
	return &UIDs{counter: counter, base: DefaultUIDBase, count: DefaultUIDCount}
}

// Owns reports whether uid is one of the allocator's.
func (u *UIDs) Owns(uid int) bool { return uid >= u.base && uid < u.base+u.count }

// Dir makes sure dir exists, is a real directory (not a link) with mode
// mode and belongs to a uid of its own, and returns that uid. When it
// exists already with one of our uids, that one is kept.
func (u *UIDs) Dir(dir string, mode os.FileMode) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := os.Mkdir(dir, mode); err != nil && !errors.Is(err, os.ErrExist) {
		return 0, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return 0, err
	}
	uid := int(st.Uid)
	if !u.Owns(uid) {
		var err error
		if uid, err = u.next(); err != nil {
			return 0, err
		}
	}
	if err := own(dir, &st, uid, mode); err != nil {
		return 0, err
	}
	return uid, nil
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

// next takes the next uid from the counter file, under an exclusive lock
// so that two processes sharing it never hand out the same uid.
func (u *UIDs) next() (int, error) {
	if err := os.MkdirAll(filepath.Dir(u.counter), 0o711); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(u.counter, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return 0, err
	}
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	next := 0
	if s := strings.TrimSpace(string(buf[:n])); s != "" {
		if next, err = strconv.Atoi(s); err != nil {
			return 0, fmt.Errorf("sandbox: uid counter %s: %w", u.counter, err)
		}
	}
	if next >= u.count {
		return 0, fmt.Errorf("sandbox: all %d session uids are taken", u.count)
	}
	if err := f.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(next+1)+"\n"), 0); err != nil {
		return 0, err
	}
	return u.base + next, f.Sync()
}
