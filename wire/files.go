package wire

import (
	"errors"
	"path"
	"strings"
	"unicode/utf8"
)

// KindFiles reads or writes one file of the session's working directory
// (Job.File says which and how); it goes, like an execution, to the worker
// that holds the directory. A write's content is Job.Code, base64, so that
// a large one travels through the blobs store as large code does.
const KindFiles JobKind = "files"

// File operations of a files job.
const (
	FileWrite = "write"
	FileRead  = "read"
)

// FileOp is what a files job does.
type FileOp struct {
	Op string `json:"op"` // FileWrite or FileRead
	// Path is relative to the working directory, slash-separated, checked
	// by CheckWorkspacePath on both sides.
	Path string `json:"path"`
	// Offset and Length choose the bytes a read returns; Length 0 means
	// as many as a read may return.
	Offset int64 `json:"offset,omitempty"`
	Length int64 `json:"length,omitempty"`
}

// FileData is Result.Data of a files job: the file's path and size, and
// for a read the bytes from Offset.
type FileData struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	Offset int64  `json:"offset,omitempty"`
	Data   []byte `json:"data,omitempty"`
}

// MaxFileRead is the most bytes one read of a files job returns.
const MaxFileRead = 4 << 20

// NoFile ends the message of a files job that found no regular file of
// the working directory at its path (missing, a link, a directory: the
// same words for all). The frontend tells a missing resource by it.
const NoFile = "no such file in the working directory"

// CheckWorkspacePath says why p cannot name a file of a working directory:
// it must be relative, clean (no ".", "..", empty or trailing component),
// valid UTF-8 without control characters, at most 1024 bytes, each name at
// most 255. A name that passes can still be a link on the worker, which
// refuses to follow one.
func CheckWorkspacePath(p string) error {
	switch {
	case p == "":
		return errors.New("the path is empty")
	case len(p) > 1024:
		return errors.New("the path is longer than 1024 bytes")
	case !utf8.ValidString(p) || strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errors.New("the path has control characters or is not UTF-8")
	case strings.HasPrefix(p, "/"):
		return errors.New("the path is absolute; name a file relative to the working directory")
	}
	for _, name := range strings.Split(p, "/") {
		switch {
		case name == "..":
			return errors.New("the path leaves the working directory (..)")
		case name == "" || name == ".":
			return errors.New("the path has an empty or '.' component")
		case len(name) > 255:
			return errors.New("a name in the path is longer than 255 bytes")
		}
	}
	if path.Clean(p) != p {
		return errors.New("the path is not clean")
	}
	return nil
}

// MaxChangedFiles bounds Result.Files.
const MaxChangedFiles = 32
