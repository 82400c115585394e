package envcache

import (
	"context"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Files EnsureVenv keeps inside a venv it builds. The ready marker is written
// last, so its presence means the venv is complete; the building marker is
// written first, so a directory holding it without the ready marker is the
// remains of an interrupted build and may be removed.
const (
	readyMarker    = ".codexec-ready"
	buildingMarker = ".codexec-building"
)

// ErrNotVenv is wrapped by the errors of ExistingVenv (and of EnsureVenv for
// a venv marked ready that no longer is one).
var ErrNotVenv = errors.New("envcache: not a venv")

// ErrNotManaged is returned by EnsureVenv when its directory exists, is not
// empty, and was not made by EnsureVenv: it never deletes what it did not
// build. Use ExistingVenv for a venv made by other means.
var ErrNotManaged = errors.New("envcache: directory exists and was not built by envcache")

// BuildError reports a failed environment build. Its message carries the
// installer's own output, since that is where the reason is.
type BuildError struct {
	// Dir is the environment being built.
	Dir string
	// Args is the command that failed.
	Args []string
	// Output is what the command printed on stdout and stderr, interleaved;
	// at most 64 KiB, the middle left out of longer output.
	Output string
	// Err is why it failed: the exit status, ctx's error, or a check of the
	// result.
	Err error
}

// Error says what was built with which command, why it failed, and what the
// command printed, with the credentials of every URL in them hidden: the
// message reaches the caller whose install failed (and the logs), and the
// command names the operator's package indexes, whose URLs may carry a
// user and password (--index-url https://user:token@...). Until 2026-12-04
// any caller read them by asking for a package that does not exist.
func (e *BuildError) Error() string {
	msg := fmt.Sprintf("envcache: build %s: %s: %v", e.Dir, strings.Join(e.Args, " "), e.Err)
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += "\n" + out
	}
	return RedactURLs(msg)
}

// urlCredentials matches the user information of a URL (scheme://user:pass@).
var urlCredentials = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]*@`)

// urlTokenPath matches a token carried as a URL's first path segments, the
// way conda channels carry one (https://host/t/<token>/channel).
var urlTokenPath = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://[^/?#\s]+/t/)[^/?#\s]+`)

// urlTokenQuery matches a credential passed in a URL's query
// (?token=..., &access_token=..., &api_key=...).
var urlTokenQuery = regexp.MustCompile(`(?i)([?&](?:token|access_token|api_key|apikey|key|password|secret)=)[^&#\s]+`)

// RedactURLs replaces every credential a URL in s may carry (its user
// information, a conda-style /t/<token>/ path segment, a token in its query)
// with "***".
func RedactURLs(s string) string {
	s = urlCredentials.ReplaceAllString(s, "${1}***@")
	s = urlTokenPath.ReplaceAllString(s, "${1}***")
	return urlTokenQuery.ReplaceAllString(s, "${1}***")
}

// Unwrap returns Err, so errors.Is(err, context.Canceled) and the like work.
func (e *BuildError) Unwrap() error { return e.Err }

// venvOptions are knobs for tests.
type venvOptions struct {
	// withoutPip skips ensurepip, which takes seconds.
	withoutPip bool
	// onBuild, when set, is called once a build has been decided on, under
	// the lock.
	onBuild func()
}

// EnsureVenv makes sure a venv built from interpreter python exists at dir,
// building it once (python -m venv dir) and returning the path of its
// bin/python.
//
// It is safe under concurrent calls from several goroutines and several
// processes: builders take a lock file in dir's parent (".<name>.lock", left
// in place), and a venv counts as present only once its ready marker exists,
// so a half-built venv is never returned. A build interrupted by a crash or
// by ctx is removed and redone by the next call. When the ready marker is
// there, EnsureVenv only checks the venv and returns at once, without the
// lock and without running anything.
//
// dir identifies the venv: once built, it is returned whatever python is
// passed later, so give each interpreter a directory of its own. A dir that
// exists, is not empty and was not built by EnsureVenv is refused with
// ErrNotManaged rather than overwritten. If python fails, the error is a
// *BuildError holding its output.
func EnsureVenv(ctx context.Context, dir, python string) (string, error) {
	return ensureVenv(ctx, dir, python, venvOptions{})
}

func ensureVenv(ctx context.Context, dir, python string, opt venvOptions) (string, error) {
	if python == "" {
		return "", errors.New("envcache: EnsureVenv: no interpreter given")
	}
	if dir == "" {
		return "", errors.New("envcache: EnsureVenv: no directory given")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("envcache: %w", err)
	}
	parent := filepath.Dir(dir)
	if parent == dir {
		return "", fmt.Errorf("envcache: cannot build a venv at %s", dir)
	}

	if py, ok, err := readyVenv(dir); ok || err != nil {
		return py, err
	}

	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("envcache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(parent, "."+filepath.Base(dir)+".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	// Another goroutine or process may have finished it while we waited.
	if py, ok, err := readyVenv(dir); ok || err != nil {
		return py, err
	}
	if err := clearLeftovers(dir); err != nil {
		return "", err
	}
	if opt.onBuild != nil {
		opt.onBuild()
	}
	return buildVenv(ctx, dir, python, opt)
}

// readyVenv reports whether dir holds a venv whose build completed. A venv
// marked ready that does not check out is an error, not a reason to rebuild:
// jobs may be using it.
func readyVenv(dir string) (string, bool, error) {
	if _, err := os.Stat(filepath.Join(dir, readyMarker)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("envcache: %w", err)
	}
	py, err := ExistingVenv(dir)
	if err != nil {
		return "", false, fmt.Errorf("%w (it was built by envcache and is broken now; remove it to rebuild)", err)
	}
	return py, true, nil
}

// clearLeftovers makes dir ready to build into. Called under the lock.
func clearLeftovers(dir string) error {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("envcache: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrNotManaged, dir)
	}
	if _, err := os.Lstat(filepath.Join(dir, buildingMarker)); err == nil {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("envcache: remove interrupted build: %w", err)
		}
		return nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("envcache: %w", err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: %s is not empty", ErrNotManaged, dir)
	}
	return nil
}

func buildVenv(ctx context.Context, dir, python string, opt venvOptions) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("envcache: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, buildingMarker), nil, 0o644); err != nil {
		return "", fmt.Errorf("envcache: %w", err)
	}

	args := []string{python, "-m", "venv"}
	if opt.withoutPip {
		args = append(args, "--without-pip")
	}
	args = append(args, dir) // absolute, so never taken for an option
	// Not confined: the operator's interpreter, no package of a user's.
	out := &cappedOutput{}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = installerEnv(os.Environ())
	cmd.Stdout, cmd.Stderr = out, out
	killGroupOnCancel(cmd)
	if err := cmd.Run(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return "", &BuildError{Dir: dir, Args: args, Output: out.String(), Err: err}
	}
	py, err := ExistingVenv(dir)
	if err != nil {
		return "", &BuildError{Dir: dir, Args: args, Output: out.String(), Err: err}
	}

	content := fmt.Sprintf("python=%s\nbuilt=%s\n", python, time.Now().UTC().Format(time.RFC3339))
	if err := writeFileAtomic(filepath.Join(dir, readyMarker), []byte(content)); err != nil {
		return "", fmt.Errorf("envcache: mark %s ready: %w", dir, err)
	}
	// The ready marker wins over the building one, so failing here is harmless.
	_ = os.Remove(filepath.Join(dir, buildingMarker))
	return py, nil
}

// installerEnv is the worker's environment without the variables that would
// make the interpreter load code from elsewhere while it builds.
func installerEnv(base []string) []string {
	env := make([]string, 0, len(base))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "PYTHONHOME", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONUSERBASE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// writeFileAtomic writes data to a temporary file next to path, syncs it and
// renames it into place, so that readers see either nothing or all of it.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
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
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync() // make the rename durable; best effort
		d.Close()
	}
	return nil
}

// ExistingVenv checks that dir is an existing venv, with a pyvenv.cfg and an
// executable bin/python, and returns the absolute path of that interpreter.
// Errors wrap ErrNotVenv and say what is missing.
func ExistingVenv(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: no directory given", ErrNotVenv)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("envcache: %w", err)
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: %s does not exist", ErrNotVenv, dir)
	case err != nil:
		return "", fmt.Errorf("%w: %w", ErrNotVenv, err)
	case !fi.IsDir():
		return "", fmt.Errorf("%w: %s is not a directory", ErrNotVenv, dir)
	}
	if fi, err := os.Stat(filepath.Join(dir, "pyvenv.cfg")); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%w: %s has no pyvenv.cfg", ErrNotVenv, dir)
	}
	py := filepath.Join(dir, "bin", "python")
	fi, err = os.Stat(py)
	if err != nil {
		if target, ok := danglingTarget(py); ok {
			return "", fmt.Errorf("%w: %s: bin/python links to %s, which is gone (was its base interpreter removed?)", ErrNotVenv, dir, target)
		}
		return "", fmt.Errorf("%w: %s has no bin/python", ErrNotVenv, dir)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s: bin/python is not an executable file", ErrNotVenv, dir)
	}
	return py, nil
}

// danglingTarget follows the chain of symbolic links that starts at path and
// returns where it ends when that end does not exist.
func danglingTarget(path string) (string, bool) {
	for range 40 { // the kernel's own limit on links followed
		target, err := os.Readlink(path)
		if err != nil {
			return "", false
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(path), target)
		}
		if _, err := os.Lstat(target); errors.Is(err, fs.ErrNotExist) {
			return target, true
		}
		path = target
	}
	return "", false
}

// Venv is the Manager for plain venvs: python -m venv, then pip.
//
// A venv with packages costs python -m venv (ensurepip: seconds) plus a pip
// install, from pip's wheel cache when warm. Given a Seed (a ready venv of
// the same interpreter, such as the parent of a derived spec), Create
// instead makes the venv without pip, hard-links the seed's files into it
// (rewriting the interpreter path in the seed's bin scripts), and lets pip
// install the full package set: what the seed already has is satisfied, so
// only the new packages are fetched. Hard links make the copy cost little
// time and no disk; files are never written in place (pip and the import
// system replace files by unlink and rename), so the seed and the child
// cannot change each other's files, and the seed may be evicted later.
type Venv struct {
	// PipCacheDir is pip's cache (PIP_CACHE_DIR); "" keeps pip's default.
	PipCacheDir string
}

var _ Manager = (*Venv)(nil)

// Name returns "venv".
func (*Venv) Name() string { return envspec.ManagerVenv }

// Available returns nil: a venv needs only its interpreter, which Create
// is given.
func (*Venv) Available(context.Context) error { return nil }

// Python returns dir/bin/python.
func (*Venv) Python(dir string) string { return filepath.Join(dir, "bin", "python") }

// Activation sets VIRTUAL_ENV and puts dir/bin first on PATH.
func (*Venv) Activation(dir string) Activation { return venvActivation(dir) }

// List reads the venv's installed distributions (see Installed).
func (*Venv) List(_ context.Context, dir string) ([]envspec.Dist, error) { return Installed(dir) }

func (v *Venv) env() []string {
	set := map[string]string{"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
	if v.PipCacheDir != "" {
		set["PIP_CACHE_DIR"] = v.PipCacheDir
	}
	return withEnv(installerEnv(os.Environ()), set, "VIRTUAL_ENV", "PIP_USER", "PIP_TARGET", "PIP_PREFIX")
}

// Create runs python -m venv dir (or, with a usable Seed, python -m venv
// --without-pip dir and a hard-linked copy of the seed), then pip installs
// req.Packages.
//
// With req.Confine, both commands run confined: python -m venv reads the
// base interpreter's installation and writes dir; pip reads that and the
// local index directories and writes dir and PipCacheDir. A confined build
// ignores the Seed: its pip would be the seed's, run with the seed's
// packages on its path, so their code would run in the install's sandbox.
func (v *Venv) Create(ctx context.Context, dir string, req CreateRequest, progress io.Writer) error {
	cf, err := newInterpreterBuild("venv", dir, req)
	if err != nil {
		return err
	}
	defer cf.close()
	// A confined build takes no seed: pip would run from the seed's copy,
	// as the child's interpreter, and so run the code of every package the
	// seed holds (its .pth files' import lines, sitecustomize, a wheel's
	// files written over pip's own) in the install sandbox, which has the
	// network and the package caches every session's builds share. A
	// fresh venv's pip is the interpreter's own (ensurepip), and it runs
	// before any package is installed.
	seed := req.Seed
	if seed != "" && (cf != nil || !seedable(seed)) {
		seed = ""
	}
	args := []string{req.Interpreter, "-m", "venv"}
	if seed != "" {
		args = append(args, "--without-pip")
	}
	args = append(args, dir)
	venv := installCmd{args: args, env: v.env(), readOnly: interpreterPaths(req.Interpreter), writable: []string{dir}}
	if _, err := runInstaller(ctx, dir, cf, venv, progress); err != nil {
		return err
	}
	if seed != "" {
		if err := copySeed(seed, dir); err != nil {
			return &BuildError{Dir: dir, Args: []string{"copy", seed, dir}, Err: err}
		}
	}
	if _, err := ExistingVenv(dir); err != nil {
		return &BuildError{Dir: dir, Args: args, Err: err}
	}
	if len(req.Packages) == 0 {
		return nil
	}
	skel, err := venvSkeleton(dir)
	if err != nil {
		return &BuildError{Dir: dir, Args: args, Err: err}
	}
	if err := v.install(ctx, dir, cf, interpreterPaths(req.Interpreter), req.Packages, req.Index, progress); err != nil {
		return err
	}
	if err := checkSkeleton(dir, skel); err != nil {
		return &BuildError{Dir: dir, Args: []string{"pip", "install"}, Err: err}
	}
	return nil
}

// install runs dir/bin/python -m pip install with idx's options and the
// canonical requirement strings after "--", confined by cf, which lets it
// read interp (the base interpreter's installation) and the local index.
func (v *Venv) install(ctx context.Context, dir string, cf *confinement, interp []string, reqs []envspec.Requirement, idx IndexConfig, progress io.Writer) error {
	if len(reqs) == 0 {
		return nil
	}
	args := []string{v.Python(dir), "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off"}
	args = append(args, idx.pipArgs()...)
	args = append(append(args, "--"), requirementArgs(reqs)...)
	c := installCmd{args: args, env: v.env(), readOnly: append(slices.Clone(interp), localIndexPaths(idx)...), writable: []string{dir}}
	if cf != nil {
		caches, err := mkdirCaches(v.PipCacheDir)
		if err != nil {
			return err
		}
		c.writable = append(c.writable, caches...)
	}
	_, err := runInstaller(ctx, dir, cf, c, progress)
	return err
}
