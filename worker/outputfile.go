package worker

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"regexp"
	"slices"
	"sync"

	"github.com/codexec/codexec/worker/runner"
	"golang.org/x/sys/unix"
)

// OutputDir is where, in a session's working directory, the worker keeps the
// whole output of a job whose stdout or stderr passed the output cap: one
// file per stream, <job id>.stdout and <job id>.stderr. The result keeps the
// first and the last bytes and names the file; the model reads the rest in
// pieces, with code or through the workspace's resources.
const OutputDir = ".codexec/output"

// maxOutputFile bounds one stream's file. The file is in the working
// directory, so it counts against the job's disk limit as well; it is at
// most a quarter of that limit, so that output alone cannot fill it.
const maxOutputFile = 64 << 20

// keptOutputFiles is how many output files a session keeps: the oldest go
// when a new one is made, so a session that prints much, call after call,
// does not fill its directory with them.
const keptOutputFiles = 8

var outputFileRe = regexp.MustCompile(`^[0-9A-HJKMNP-TV-Z]{26}\.std(out|err)$`)

// errOutputFileFull ends a spill at its bound.
var errOutputFileFull = errors.New("output file full")

// outputFiles makes and holds the output files of one job. Spill is
// runner.Spec.Spill; the two streams may call it at once.
type outputFiles struct {
	cwd, jobID string
	uid        int
	max        int64
	log        *slog.Logger

	mu    sync.Mutex
	files map[string]*outputFile
}

// newOutputFiles returns the output files of job, in cwd, owned by uid;
// disk is the job's disk limit (0: none).
func newOutputFiles(cwd, jobID string, uid int, disk int64, log *slog.Logger) *outputFiles {
	limit := int64(maxOutputFile)
	if disk > 0 {
		limit = min(limit, disk/4)
	}
	return &outputFiles{cwd: cwd, jobID: jobID, uid: uid, max: limit, log: log, files: map[string]*outputFile{}}
}

// Spill opens the file of stream; nil when it cannot be made (logged: the
// result says the output was cut, without a file).
func (o *outputFiles) Spill(stream string) io.Writer {
	o.mu.Lock()
	defer o.mu.Unlock()
	rel := path.Join(OutputDir, o.jobID+"."+stream)
	f, err := createBeneath(o.cwd, rel, o.uid)
	if err != nil {
		o.log.Warn("keep the whole output in the working directory", "stream", stream, "err", err)
		return nil
	}
	of := &outputFile{f: f, rel: rel, max: o.max}
	o.files[stream] = of
	return of
}

// close closes the files and returns the working-directory path of each
// stream's file.
func (o *outputFiles) close() map[string]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	paths := map[string]string{}
	for stream, f := range o.files {
		if err := f.f.Close(); err != nil {
			o.log.Warn("close the output file", "file", f.rel, "err", err)
		}
		paths[stream] = f.rel
	}
	return paths
}

// outputFile is one stream's file, bounded.
type outputFile struct {
	f      *os.File
	rel    string
	n, max int64
}

func (f *outputFile) Write(p []byte) (int, error) {
	room := f.max - f.n
	full := int64(len(p)) > room
	if full {
		p = p[:max(room, 0)]
	}
	n, err := f.f.Write(p)
	f.n += int64(n)
	if err == nil && full {
		err = errOutputFileFull
	}
	return n, err
}

// createBeneath creates the file rel (OutputDir/<name>) below cwd, and the
// directories on its way, never following a link: the working directory is
// the job's, which may have put a link anywhere on that path. Each name is
// resolved with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, relative to the
// directory before it, and the new file must not exist (O_EXCL). What it
// makes is uid's, so the session's later jobs read and remove it. Older
// output files beyond keptOutputFiles are removed first.
func createBeneath(cwd, rel string, uid int) (*os.File, error) {
	dir, err := unix.Open(cwd, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	parts, name := splitDirs(rel)
	for _, p := range parts {
		next, err := mkdirBeneath(dir, p, uid)
		unix.Close(dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		dir = next
	}
	defer unix.Close(dir)
	pruneOutputFiles(dir, keptOutputFiles-1)
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_CLOEXEC,
		Mode:    0o600,
		Resolve: beneath,
	})
	if err != nil {
		return nil, err
	}
	if err := unix.Fchown(fd, uid, gidOf(uid)); err != nil && !errors.Is(err, unix.EPERM) {
		unix.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), rel), nil
}

const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// mkdirBeneath makes directory name in dir unless it is there, and opens it
// without following a link.
func mkdirBeneath(dir int, name string, uid int) (int, error) {
	made := unix.Mkdirat(dir, name, 0o700) == nil
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: beneath,
	})
	if err != nil {
		return -1, err
	}
	if made {
		if err := unix.Fchown(fd, uid, gidOf(uid)); err != nil && !errors.Is(err, unix.EPERM) {
			unix.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// splitDirs splits a slash-separated relative path into its directories
// and its last name.
func splitDirs(rel string) (dirs []string, name string) {
	d, name := path.Split(rel)
	if d = path.Clean(d); d != "." {
		for p := d; p != "."; p = path.Dir(p) {
			dirs = append([]string{path.Base(p)}, dirs...)
		}
	}
	return dirs, name
}

// pruneOutputFiles removes the oldest output files of dir (ULID names sort
// by time) so that at most keep remain; other names are left alone.
func pruneOutputFiles(dir, keep int) {
	names, err := readNames(dir, OutputDir, maxWalk, outputFileRe.MatchString)
	if err != nil {
		return
	}
	slices.Sort(names)
	for len(names) > keep {
		_ = unix.Unlinkat(dir, names[0], 0) // a directory of that name stays
		names = names[1:]
	}
}

// keepOutputFiles makes the job's output, past its cap, spill to files of
// its working directory; what it returns closes them once the run is over
// and says, by stream, where they are.
func keepOutputFiles(spec *runner.Spec, jobID, cwd string, uid int, disk int64, log *slog.Logger) func() map[string]string {
	o := newOutputFiles(cwd, jobID, uid, disk, log)
	spec.Spill = o.Spill
	return o.close
}

// cutOutput renders a stream cut at the output cap: its first bytes, a line
// that says how much was dropped there and where the whole output is, its
// last bytes. The line takes the place of the last noteRoom bytes of the
// first ones, so that the text stays within the cap. Uncut, it is the
// stream as it was.
func cutOutput(stream string, kept []byte, cut int, total, spilled int64, file string) string {
	if total <= int64(len(kept)) {
		return string(kept)
	}
	head, tail := kept[:max(0, cut-noteRoom)], kept[cut:]
	dropped := total - int64(len(head)+len(tail))
	var where string
	switch {
	case file == "":
		where = "not kept elsewhere"
	case spilled == total:
		where = fmt.Sprintf("all %d bytes are in the file %s of the working directory", total, file)
	default:
		where = fmt.Sprintf("the first %d of %d bytes are in the file %s of the working directory", spilled, total, file)
	}
	sep := "\n"
	if len(head) == 0 || head[len(head)-1] == '\n' {
		sep = ""
	}
	return fmt.Sprintf("%s%s[... %d bytes of %s dropped here; %s ...]\n%s", head, sep, dropped, stream, where, tail)
}

// noteRoom is what cutOutput's line may take: numbers of 19 digits at most,
// a file name of OutputDir, a job id and a stream.
const noteRoom = 256
