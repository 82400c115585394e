package envcache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrPythonNotFound is wrapped by ResolvePython's error when no usable
// interpreter matched.
var ErrPythonNotFound = errors.New("envcache: no Python interpreter found")

var (
	commandNameRe = regexp.MustCompile(`^[A-Za-z0-9_+][A-Za-z0-9._+-]*$`)
)

// probeScript prints the interpreter's real path and its version. It must run
// under Python 2 as well, to say so clearly when that is what was found.
const probeScript = "import sys; print(sys.executable); print('%d.%d.%d' % sys.version_info[:3])"

// probeTimeout bounds one run of probeScript: a pyenv shim may start a shell
// and pyenv itself first.
const probeTimeout = 15 * time.Second

// ResolvePython finds an interpreter and returns its path.
//
//   - A path (anything holding a '/') is used as is, made absolute; it must
//     be an executable file.
//   - A bare command name ("python3", "python3.12", "pypy3") is looked up on
//     PATH.
//   - A version ("3", "3.12", "3.12.1") is looked up as python3.12 on PATH,
//     then under $PYENV_ROOT/versions/3.12.*/bin/python3 (PYENV_ROOT defaults
//     to ~/.pyenv), the highest matching version first.
//
// Every candidate found by name or version is run once (python -E -S -c ...)
// to check that it works and, for a version, that it is that version, and
// the path it reports as sys.executable is returned. That resolves version
// managers' shims to the real interpreter: a pyenv shim on PATH may exist
// and yet fail ("pyenv: python3.12: command not found"), and one that works
// depends on pyenv's variables, which jobs do not get.
//
// When nothing fits, the error wraps ErrPythonNotFound and says what was
// tried and why each candidate failed.
func ResolvePython(nameOrVersion string) (string, error) {
	r := resolver{path: os.Getenv("PATH"), pyenvRoot: os.Getenv("PYENV_ROOT")}
	if r.pyenvRoot == "" {
		if home, err := os.UserHomeDir(); err == nil {
			r.pyenvRoot = filepath.Join(home, ".pyenv")
		}
	}
	return r.resolve(nameOrVersion)
}

// resolver holds what ResolvePython reads from the process environment, so
// that tests can give their own.
type resolver struct {
	path      string // PATH
	pyenvRoot string // "" when there is none
}

func (r resolver) resolve(s string) (string, error) {
	switch {
	case s == "":
		return "", errors.New("envcache: ResolvePython: no interpreter named")
	case strings.ContainsRune(s, '/'):
		return executablePath(s)
	case envspec.IsPythonVersion(s):
		return r.resolveVersion(s)
	case commandNameRe.MatchString(s):
		p, err := r.lookPath(s)
		if err != nil {
			return "", fmt.Errorf("%w: %s is not on PATH", ErrPythonNotFound, s)
		}
		exe, err := probe(p, "")
		if err != nil {
			return "", fmt.Errorf("%w: %s on PATH (%s) %v", ErrPythonNotFound, s, p, err)
		}
		return exe, nil
	default:
		return "", fmt.Errorf("envcache: ResolvePython: %q is neither a path, a command name nor a version like 3.12", s)
	}
}

func (r resolver) resolveVersion(version string) (string, error) {
	var tried []string
	parts := strings.Split(version, ".")
	name := "python" + strings.Join(parts[:min(2, len(parts))], ".")
	if p, err := r.lookPath(name); err != nil {
		tried = append(tried, name+" on PATH: not found")
	} else if exe, err := probe(p, version); err != nil {
		tried = append(tried, fmt.Sprintf("%s on PATH (%s): %v", name, p, err))
	} else {
		return exe, nil
	}

	if r.pyenvRoot == "" {
		tried = append(tried, "pyenv: no PYENV_ROOT and no home directory")
	} else {
		bin := "python" + parts[0]
		pattern := filepath.Join(r.pyenvRoot, "versions", version+".*", "bin", bin)
		exact := filepath.Join(r.pyenvRoot, "versions", version, "bin", bin)
		// The pattern holds only digits and dots of ours: no glob syntax error.
		candidates, _ := filepath.Glob(pattern)
		if _, err := os.Stat(exact); err == nil {
			candidates = append(candidates, exact)
		}
		sortNewestFirst(candidates, r.pyenvRoot)
		if len(candidates) == 0 {
			tried = append(tried, pattern+": no match")
		}
		for _, p := range candidates {
			exe, err := probe(p, version)
			if err == nil {
				return exe, nil
			}
			tried = append(tried, fmt.Sprintf("%s: %v", p, err))
		}
	}
	return "", fmt.Errorf("%w: Python %s; tried %s", ErrPythonNotFound, version, strings.Join(tried, "; "))
}

// sortNewestFirst orders interpreter paths under root/versions by their
// version directory, highest version first (3.12.10 before 3.12.9).
func sortNewestFirst(paths []string, root string) {
	versionOf := func(p string) []int {
		rel, _ := filepath.Rel(filepath.Join(root, "versions"), p)
		dir, _, _ := strings.Cut(rel, string(filepath.Separator))
		var nums []int
		for _, f := range strings.Split(dir, ".") {
			// Keep the leading digits: "0t" (free-threaded) counts as 0.
			end := strings.IndexFunc(f, func(r rune) bool { return r < '0' || r > '9' })
			if end < 0 {
				end = len(f)
			}
			n, _ := strconv.Atoi(f[:end])
			nums = append(nums, n)
		}
		return nums
	}
	slices.SortStableFunc(paths, func(a, b string) int {
		if c := slices.Compare(versionOf(b), versionOf(a)); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
}

// lookPath finds an executable file called name in the directories of r.path.
// Empty and relative entries are skipped: a job's working directory must
// never decide which interpreter the worker uses.
func (r resolver) lookPath(name string) (string, error) {
	for _, dir := range filepath.SplitList(r.path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH", name)
}

// executablePath checks that p is an executable file and returns it absolute.
func executablePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("envcache: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPythonNotFound, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrPythonNotFound, abs)
	}
	return abs, nil
}

// probe runs the interpreter at p and returns the path it reports as
// sys.executable. When version is not empty, the interpreter's version must
// be it or start with it ("3.12" accepts 3.12.1).
func probe(p, version string) (string, error) {
	exe, got, err := probeInfo(p)
	if err != nil {
		return "", err
	}
	if version != "" && got != version && !strings.HasPrefix(got, version+".") {
		return "", fmt.Errorf("is Python %s, not %s", got, version)
	}
	return exe, nil
}

// interpreterVersion returns the version of the interpreter at p
// ("3.12.1").
func interpreterVersion(p string) (string, error) {
	_, v, err := probeInfo(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s %v", ErrPythonNotFound, p, err)
	}
	return v, nil
}

// probeInfo runs the interpreter at p and returns the path it reports as
// sys.executable (p itself when it reports none) and its version. It is
// not confined (see Confiner): p is one of the worker's interpreters,
// found from the operator's configuration or a version number, and runs
// with -E -S a fixed script that imports nothing a user installed.
func probeInfo(p string) (exe, version string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	var stdout, stderr cappedOutput
	cmd := exec.CommandContext(ctx, p, "-E", "-S", "-c", probeScript)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		if msg := firstLines(stderr.String(), 3); msg != "" {
			return "", "", fmt.Errorf("does not run: %v: %s", err, msg)
		}
		return "", "", fmt.Errorf("does not run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 || !envspec.IsPythonVersion(strings.TrimSpace(lines[1])) {
		return "", "", fmt.Errorf("is not a Python interpreter: it printed %q", firstLines(stdout.String(), 3))
	}
	exe, version = strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1])
	if exe == "" || !filepath.IsAbs(exe) {
		exe = p // an embedded interpreter may not know its path
	}
	return exe, version, nil
}

// firstLines returns up to n non-empty lines of s, joined by " / ".
func firstLines(s string, n int) string {
	var out []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
			if len(out) == n {
				break
			}
		}
	}
	return strings.Join(out, " / ")
}
