package worker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/codexec/codexec/internal/units"
	"github.com/codexec/codexec/wire"
	"github.com/codexec/codexec/worker/runner"
	"golang.org/x/sys/unix"
)

// DisplayDir is where, in a session's working directory, a job leaves the
// pictures it displays: DisplayDir/<job id>/0001.png, ... (richout.py, in
// the zygote, writes them; the job may write them itself too). The worker
// reads them once the job is over, as files the job controls: regular files
// of that name pattern only, opened without following links, PNG only,
// within the limits below, then removes them.
const DisplayDir = ".codexec/display"

// Limits on a job's pictures: how many, how large each, how large all.
const (
	maxImages      = 8
	maxImageBytes  = 2 << 20
	maxImagesBytes = 8 << 20
)

var imageNameRe = regexp.MustCompile(`^[0-9]{4}\.png$`)

var pngSignature = []byte("\x89PNG\r\n\x1a\n")

// showPictures gives the job its display directory (CODEXEC_DISPLAY_DIR)
// and the Agg backend of matplotlib (MPLBACKEND, unless the environment
// sets one); what it returns collects the pictures once the run is over.
func showPictures(spec *runner.Spec, jobID, cwd string, log *slog.Logger) func() ([]wire.Image, []string) {
	rel := path.Join(DisplayDir, jobID)
	if !slices.ContainsFunc(spec.Env, func(kv string) bool { return strings.HasPrefix(kv, "MPLBACKEND=") }) {
		spec.Env = append(spec.Env, "MPLBACKEND=Agg")
	}
	spec.Env = append(spec.Env, "CODEXEC_DISPLAY_DIR="+filepath.Join(cwd, rel))
	return func() ([]wire.Image, []string) {
		images, notes, err := collectPictures(cwd, jobID)
		if err != nil {
			log.Warn("read the job's pictures", "err", err)
			notes = append(notes, "the pictures the job displayed could not be read")
		}
		return images, notes
	}
}

// collectPictures reads and removes the pictures of job jobID under cwd.
func collectPictures(cwd, jobID string) (images []wire.Image, notes []string, err error) {
	top, err := unix.Open(cwd, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(top)
	parent, err := openDirBeneath(top, DisplayDir)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil, nil // the job displayed nothing
	}
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(parent)
	dir, err := openDirBeneath(parent, jobID)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	names, err := dirNames(dir)
	if err != nil {
		unix.Close(dir)
		return nil, nil, err
	}
	var total int64
	left := 0
	for i, name := range names {
		if len(images) == maxImages {
			left++
			_ = unix.Unlinkat(dir, name, 0)
			continue
		}
		data, why := readPicture(dir, name, maxImagesBytes-total)
		_ = unix.Unlinkat(dir, name, 0)
		if why != "" {
			notes = append(notes, fmt.Sprintf("picture %d left out: %s", i+1, why))
			continue
		}
		total += int64(len(data))
		images = append(images, wire.Image{MIMEType: "image/png", Data: data})
	}
	if left > 0 {
		notes = append(notes, fmt.Sprintf("%d more picture(s) left out: at most %d are returned per call", left, maxImages))
	}
	unix.Close(dir)
	_ = unix.Unlinkat(parent, jobID, unix.AT_REMOVEDIR) // stays if the job left more in it
	return images, notes, nil
}

// readPicture reads picture name of dir, a PNG file of at most
// maxImageBytes and room; why says why it is left out, if it is.
func readPicture(dir int, name string, room int64) (data []byte, why string) {
	fd, err := unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOFOLLOW,
		Resolve: beneath,
	})
	if err != nil {
		return nil, "not a regular file"
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil || !fi.Mode().IsRegular():
		return nil, "not a regular file"
	case fi.Size() > maxImageBytes:
		return nil, fmt.Sprintf("%d bytes, more than the limit of %s per picture", fi.Size(), units.FormatSize(maxImageBytes, 1<<20))
	case fi.Size() > room:
		return nil, fmt.Sprintf("the pictures before it took the %s all pictures of a call may take", units.FormatSize(maxImagesBytes, 1<<20))
	}
	data, err = io.ReadAll(io.LimitReader(f, fi.Size()))
	if err != nil || int64(len(data)) != fi.Size() {
		return nil, "changed while it was read"
	}
	if !bytes.HasPrefix(data, pngSignature) {
		return nil, "not a PNG image"
	}
	return data, ""
}

// openDirBeneath opens the directory rel of dir without following a link.
func openDirBeneath(dir int, rel string) (int, error) {
	return unix.Openat2(dir, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: beneath,
	})
}

// dirNames lists the picture names of dir, in order, among its first
// maxWalk entries (readNames).
func dirNames(dir int) ([]string, error) {
	names, err := readNames(dir, DisplayDir, maxWalk, imageNameRe.MatchString)
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	return names, nil
}
