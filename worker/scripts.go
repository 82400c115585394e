package worker

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// scriptFiles writes each job's script into its session's scripts
// directory, reusing the files of the session's ended jobs. Making a file
// is what costs: on the ext4 disks of the machines codexec was measured on,
// allocating an inode took 0.75 ms of CPU (a create, a mkdir or an
// O_TMPFILE alike), against 0.07 ms for a rename, a truncate and a write of
// a file already there; with one new file per job, the script's create
// was 0.9 ms of the 2.2 ms of CPU the worker and frontend spent on a
// print(1). So a script, once its job is over, is emptied and renamed
// .free-<job id> in the same directory, and the session's next job renames
// it to its own script's name. A file is only ever reused within its
// session's directory, never by another session: a process of the session
// that kept it open sees only the session's own code.
type scriptFiles struct {
	mu   sync.Mutex
	free map[string][]string // scripts directory -> its free files
	// tidied are the scripts directories this run of the worker has
	// tidied (tidy).
	tidied map[string]bool
}

// maxFreeScripts is how many emptied scripts a session's directory keeps
// for reuse: as many as the jobs of a session that a worker runs at once
// with its default concurrency (8), each an empty file.
const maxFreeScripts = 8

// write makes path, a script of directory dir, hold content, reusing a free
// file of dir when there is one. Like writeNew it replaces nothing: when
// path exists (a redelivered job finds its own script) the error wraps
// fs.ErrExist.
func (s *scriptFiles) write(dir, path, content string) error {
	s.tidy(dir)
	for {
		free := s.take(dir)
		if free == "" {
			return writeNew(path, content)
		}
		err := unix.Renameat2(unix.AT_FDCWD, free, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		switch {
		case errors.Is(err, unix.EEXIST):
			s.put(dir, free)
			return &fs.PathError{Op: "write", Path: path, Err: fs.ErrExist}
		case err != nil:
			// Gone (the session's directory was removed), or renameat2's
			// flag refused by the file system: the free file is dropped.
			_ = os.Remove(free)
			continue
		}
		f, err := openOwnFile(path)
		if err != nil {
			_ = os.Remove(path)
			return writeNew(path, content)
		}
		if _, err := f.WriteString(content); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
}

// release ends the script path of job id: emptied and kept for the
// session's next job, or removed when its directory keeps enough. The job's
// uid cannot remove or replace it (in a sandbox its scripts directory is
// read-only to it); a file that is no longer a regular one of a single
// link is removed, never reused.
func (s *scriptFiles) release(path, id string, log *slog.Logger) {
	dir := filepath.Dir(path)
	if s.count(dir) < maxFreeScripts {
		if f, err := openOwnFile(path); err == nil {
			f.Close()
			free := filepath.Join(dir, ".free-"+id)
			if unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, free, unix.RENAME_NOREPLACE) == nil {
				s.put(dir, free)
				return
			}
		}
	}
	removeScript(path, log)
}

// forget drops what is known of dir's free files (its session's files were
// removed).
func (s *scriptFiles) forget(dir string) {
	s.mu.Lock()
	delete(s.free, dir)
	delete(s.tidied, dir)
	s.mu.Unlock()
}

// tidy runs before the first job of dir's session in this run of the
// worker. The job scripts and free files there are an earlier run's: the
// scripts of the jobs it was running when it ended (kill -9, a crash),
// each holding its job's code, and free files it no longer knew. Left, they
// stayed until the session was collected, whether or not the jobs were run
// again here (a redelivered job writes its script again). The free files
// are kept for reuse (up to maxFreeScripts), the scripts removed.
// Directories (codexec dev keeps the code files' copies in files/) and the
// scripts of contexts (context_*) are left alone.
func (s *scriptFiles) tidy(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tidied[dir] {
		return
	}
	if s.tidied == nil {
		s.tidied = map[string]bool{}
	}
	s.tidied[dir] = true
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, "context_") {
			continue // codexec dev's files/, the code files' copies; a context's own
		}
		p := filepath.Join(dir, name)
		if strings.HasPrefix(name, ".free-") && len(s.free[dir]) < maxFreeScripts {
			if f, err := openOwnFile(p); err == nil {
				f.Close()
				if s.free == nil {
					s.free = map[string][]string{}
				}
				s.free[dir] = append(s.free[dir], p)
				continue
			}
		}
		_ = os.Remove(p)
	}
}

func (s *scriptFiles) take(dir string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.free[dir]
	if len(list) == 0 {
		return ""
	}
	free := list[len(list)-1]
	if len(list) == 1 {
		delete(s.free, dir)
	} else {
		s.free[dir] = list[:len(list)-1]
	}
	return free
}

func (s *scriptFiles) put(dir, free string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free == nil {
		s.free = map[string][]string{}
	}
	s.free[dir] = append(s.free[dir], free)
}

func (s *scriptFiles) count(dir string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.free[dir])
}

// openOwnFile opens path for writing, emptied, when it is a regular file
// with no other link, never following a link.
func openOwnFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		f.Close()
		return nil, errors.New("not a regular file of one link")
	}
	// Only a file that holds something is truncated: on ext4, a file
	// truncated to nothing and then written is flushed to disk when it is
	// closed (auto_da_alloc), which tripled what a reused script cost.
	// release empties a script, with nothing written after it.
	if st.Size > 0 {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}
