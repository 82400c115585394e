package codefiles

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/codexec/codexec/wire"
)

// Code-file names and the paths a client may use for them.
//
// A code file is named by one path element: ASCII letters, digits, '.', '_'
// and '-', starting with a letter or digit, ending in ".py", at most
// wire.MaxFilenameLen bytes. These are exactly the names wire.CleanFilename
// returns, which is how initialize_code_file names a new file, so every file
// that exists has such a name, and a name is never transformed on lookup
// beyond adding the ".py" a bare "main" leaves out.
//
// A client's file_path is accepted in three forms, and nothing else:
//
//   - a bare name, "main.py" (or "main"),
//   - the stable pseudo-path "codexec://files/main.py" (FilesURIPrefix),
//     which initialize_code_file returns in a cluster,
//   - in `codexec dev`, the real on-disk path initialize_code_file returned:
//     DIR/<scope>/files/main.py, where DIR is Config.MirrorDir and
//     <scope> is the calling session's own scope. The prefix must match
//     byte for byte; the path is never cleaned or resolved, so "..", links
//     and another session's directory cannot lead anywhere.
//
// Everything else is refused with an error that names the problem.

// Resolve turns a client's file_path into the name of a code file of scope
// (see above for the forms accepted); the error names the problem and is
// meant for the client.
func (cs *CodeStore) Resolve(scope, filePath string) (string, error) {
	return resolveFilePath(filePath, mirrorPrefix(cs.cfg.MirrorDir, scope))
}

// FilePath is what the tools hand out as file_path for code file name of
// scope: the on-disk copy in `codexec dev`, the codexec:// pseudo-path
// otherwise. Resolve turns it back into name.
func (cs *CodeStore) FilePath(scope, name string) string {
	if p := cs.mirrorPath(scope, name); p != "" {
		return p
	}
	return FilesURIPrefix + name
}

// FilesURIPrefix starts the pseudo-path of a code file in a cluster, where
// files live in Redis and have no path on any disk the client could see:
// "codexec://files/<name>". It is accepted in `codexec dev` as well.
const FilesURIPrefix = "codexec://files/"

// maxFilePathLen bounds a file_path argument. The longest valid one is a
// mirror directory plus a name; anything longer is refused before parsing.
const maxFilePathLen = 4096

// resolveFilePath turns a client's file_path into a code-file name of the
// session whose on-disk files directory is mirrorPrefix (DIR/<scope>/files/,
// with the trailing separator; empty when there is no on-disk copy). The
// result always satisfies validName; FuzzResolveFilePath checks that.
func resolveFilePath(p, mirrorPrefix string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("file_path is empty: give the file name (e.g. 'main.py') or the file_path initialize_code_file returned")
	case len(p) > maxFilePathLen:
		return "", fmt.Errorf("file_path is %d bytes long; the limit is %d", len(p), maxFilePathLen)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("file_path contains a NUL byte")
	case strings.IndexByte(p, '\\') >= 0:
		return "", fmt.Errorf("file_path %q contains a backslash; use the bare file name (e.g. 'main.py')", p)
	}
	rest := p
	switch {
	case strings.HasPrefix(p, FilesURIPrefix):
		rest = p[len(FilesURIPrefix):]
	case mirrorPrefix != "" && strings.HasPrefix(p, mirrorPrefix):
		rest = p[len(mirrorPrefix):]
	case strings.Contains(p, "://"):
		return "", fmt.Errorf("file_path %q is not a code file of this session (code files are %s<name>)", p, FilesURIPrefix)
	case filepath.IsAbs(p) || strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("file_path %q is an absolute path outside this session's code files; give the bare file name or the file_path initialize_code_file returned", p)
	}
	return validName(rest)
}

// validName checks a bare code-file name and returns it with ".py" added
// when it has no such suffix. It refuses, naming the problem, anything that
// is not one plain path element that wire.CleanFilename would also return.
func validName(name string) (string, error) {
	switch {
	case name == "":
		return "", fmt.Errorf("no file name given")
	case len(name) > wire.MaxFilenameLen:
		// First: the messages below quote the name, which must not send a
		// caller's megabytes back.
		return "", fmt.Errorf("file name is %d bytes long; the limit is %d", len(name), wire.MaxFilenameLen)
	case name == "." || name == "..", strings.Contains(name, ".."):
		return "", fmt.Errorf("file name %q contains '..': code files are single names in the session's own storage", name)
	case strings.ContainsAny(name, "/\\"):
		return "", fmt.Errorf("file name %q contains a directory; code files are single names such as 'main.py'", name)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("file name contains a NUL byte")
	case name[0] == '.':
		return "", fmt.Errorf("file name %q starts with '.'", name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", fmt.Errorf("file name %q contains %q; names use only ASCII letters, digits, '.', '_' and '-'", name, c)
		}
	}
	if !strings.HasSuffix(name, ".py") {
		name += ".py"
	}
	if len(name) > wire.MaxFilenameLen {
		return "", fmt.Errorf("file name is %d bytes long; the limit is %d", len(name), wire.MaxFilenameLen)
	}
	if wire.CleanFilename(name) != name {
		return "", fmt.Errorf("no code file can be named %q: names start with a letter or digit and do not end in '.', '_' or '-' before '.py'", name)
	}
	return name, nil
}

// mirrorPrefix is DIR/<scope>/files/ for the on-disk copy of scope's files,
// or "" when there is none.
func mirrorPrefix(dir, scope string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, scope, "files") + string(filepath.Separator)
}
