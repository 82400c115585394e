package envcache

import (
	"context"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Manager builds and inspects environments of one kind (venv, uv, conda).
// Every command runs from an argv list, never through a shell, with its
// working directory set to the environment's parent directory. Methods are
// safe for concurrent use on different directories.
type Manager interface {
	// Name is the manager's name: "venv", "uv" or "conda".
	Name() string
	// Available returns nil when the manager can build environments on this
	// machine, or an error saying why not ("uv: not found on PATH").
	Available(ctx context.Context) error
	// Create builds a new environment at dir, which must not exist yet
	// (its parent must), with req's packages installed. What it printed
	// also goes to progress when that is not nil. A failed command is
	// reported as a *BuildError carrying its output; dir may then hold the
	// remains, which the caller removes.
	Create(ctx context.Context, dir string, req CreateRequest, progress io.Writer) error
	// Python returns the interpreter jobs run with: dir/bin/python.
	Python(dir string) string
	// Activation returns what activating the environment would set.
	Activation(dir string) Activation
	// List returns the distributions installed in the environment.
	List(ctx context.Context, dir string) ([]envspec.Dist, error)
}

// CreateRequest is what Manager.Create builds.
type CreateRequest struct {
	// Interpreter is the absolute path of the base interpreter (venv, uv);
	// conda installs its own and ignores it.
	Interpreter string
	// Python is the version asked for ("3.12", "" for the default); conda
	// installs python=<Python>, or its newest python when "".
	Python string
	// Packages are installed with the environment.
	Packages []envspec.Requirement
	// Index says where packages come from (see IndexConfig).
	Index IndexConfig
	// Seed, when not empty, is a ready environment of the same manager
	// and interpreter whose packages the new one may start from. venv
	// copies it with hard links, and only when not confined (see
	// Venv.Create); uv and conda ignore it, since
	// their own package caches already make a rebuild cheap.
	Seed string
	// Confine, when not nil, wraps every command of the build (the
	// installer and the interpreters it starts) so that it runs confined,
	// able to write only dir, the manager's package cache and a temporary
	// directory of its own (see Confiner). dir is then created first, empty,
	// so that it can be bound. The Cache sets it from Config.Confine.
	Confine Confiner
}

// IndexConfig says where pip and uv find packages. For conda, only NoIndex
// applies (as --offline): conda's channels are set on Conda, since a PyPI
// index is not a conda channel.
type IndexConfig struct {
	// IndexURL replaces PyPI (--index-url); "" keeps the installer's
	// default.
	IndexURL string `json:"index_url,omitempty"`
	// ExtraIndexURLs are searched as well (--extra-index-url, each).
	ExtraIndexURLs []string `json:"extra_index_urls,omitempty"`
	// FindLinks are directories or pages of archives to search
	// (--find-links, each).
	FindLinks []string `json:"find_links,omitempty"`
	// NoIndex searches no index at all (--no-index): only FindLinks.
	NoIndex bool `json:"no_index,omitempty"`
	// SourceBuilds lets pip and uv build packages from source
	// distributions. Off, they install wheels only (--only-binary :all:):
	// building runs the package's own code at install time, which can
	// write the shared package caches (and so plant code in other
	// sessions' environments) and reach the worker's network.
	SourceBuilds bool `json:"source_builds,omitempty"`
}

// pipArgs returns the options pip and uv pip share for idx.
func (idx IndexConfig) pipArgs() []string {
	var args []string
	if idx.NoIndex {
		args = append(args, "--no-index")
	}
	if idx.IndexURL != "" {
		args = append(args, "--index-url", idx.IndexURL)
	}
	for _, u := range idx.ExtraIndexURLs {
		args = append(args, "--extra-index-url", u)
	}
	for _, f := range idx.FindLinks {
		args = append(args, "--find-links", f)
	}
	if !idx.SourceBuilds {
		args = append(args, "--only-binary", ":all:")
	}
	return args
}

// Activation is what activating an environment sets, for a process started
// without a shell: variables, and directories to put first on PATH.
type Activation struct {
	// Vars are set as given: VIRTUAL_ENV for a venv; CONDA_PREFIX,
	// CONDA_DEFAULT_ENV and CONDA_SHLVL for conda.
	Vars map[string]string `json:"vars,omitempty"`
	// PathPrefix are directories to put before PATH, in order (the
	// environment's bin).
	PathPrefix []string `json:"path_prefix,omitempty"`
}

// Apply returns environ (a list of NAME=value, as os.Environ gives) with
// a's variables set, PATH prefixed, and PYTHONHOME removed, since it would
// point the interpreter at another installation. environ is not modified.
// conda activation scripts (etc/conda/activate.d) are not run.
func (a Activation) Apply(environ []string) []string {
	out := make([]string, 0, len(environ)+len(a.Vars)+1)
	path := ""
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case name == "PATH":
			path = value
			continue
		case name == "PYTHONHOME":
			continue
		case a.Vars[name] != "":
			continue
		}
		out = append(out, kv)
	}
	names := make([]string, 0, len(a.Vars))
	for name := range a.Vars {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, name+"="+a.Vars[name])
	}
	parts := slices.Clone(a.PathPrefix)
	if path != "" {
		parts = append(parts, path)
	}
	if len(parts) > 0 {
		out = append(out, "PATH="+strings.Join(parts, string(filepath.ListSeparator)))
	}
	return out
}

// availableTimeout bounds the --version run of Available.
const availableTimeout = 15 * time.Second

// installCmd is one command of a build: its argv and environment, and
// what it must read and may write when confined (see Confiner).
type installCmd struct {
	args, env          []string
	readOnly, writable []string
}

// runInstaller runs one installer command for the environment at dir, in
// dir's parent, confined by cf, and returns its stdout (capped). Its
// output, stdout and stderr interleaved, also goes to progress. A failure
// is a *BuildError, which names c.args (not the confining command line).
func runInstaller(ctx context.Context, dir string, cf *confinement, c installCmd, progress io.Writer) (*cappedOutput, error) {
	args := c.args
	argv, env, err := cf.command(c.args, c.env, c.readOnly, c.writable)
	if err != nil {
		return nil, &BuildError{Dir: dir, Args: args, Err: err}
	}
	out := &cappedOutput{}
	var w io.Writer = out
	if progress != nil {
		w = io.MultiWriter(out, progress)
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	cmd := exec.CommandContext(runCtx, argv[0], argv[1:]...)
	cmd.Dir = filepath.Dir(dir)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = w, w
	killGroupOnCancel(cmd)
	if err := cmd.Start(); err != nil {
		return out, &BuildError{Dir: dir, Args: args, Output: out.String(), Err: err}
	}
	guarded := make(chan struct{})
	go func() {
		defer close(guarded)
		guardDisk(runCtx, stop, append([]string{filepath.Dir(dir)}, c.writable...))
	}()
	err = cmd.Wait()
	stop(nil)
	<-guarded
	if err != nil {
		if cause := context.Cause(runCtx); errors.Is(cause, ErrBuildFillsDisk) {
			err = fmt.Errorf("%w (%v)", cause, err)
		} else if ctxErr := ctx.Err(); ctxErr != nil {
			err = fmt.Errorf("%w (%v)", ctxErr, err)
		}
		return out, &BuildError{Dir: dir, Args: args, Output: out.String(), Err: err}
	}
	return out, nil
}

// ErrBuildFillsDisk is the cause of a build stopped because it was about
// to fill the disk of the environment or of a package cache.
var ErrBuildFillsDisk = errors.New("envcache: the build was stopped: it was filling the worker's disk")

// diskGuardEvery is how often guardDisk looks at the free space.
var diskGuardEvery = 50 * time.Millisecond

// diskFloor is the free space (of a file system of total bytes, avail of
// them free when a build starts) below which the build is stopped: 5 % of
// the file system and at least 1 GiB, or half of what was free where that
// is less, so that a build on a nearly full disk may still use some.
var diskFloor = func(avail, total uint64) uint64 {
	return min(max(total/20, 1<<30), avail/2)
}

// inodeFloor is the same for inodes: 5 % of the file system's and at
// least 65,536, or half of those free when the build starts. A wheel of
// 100 MB may hold a million empty files, each an inode of the cache and
// one of the environment.
var inodeFloor = func(free, total uint64) uint64 {
	return min(max(total/20, 1<<16), free/2)
}

// guardDisk stops the build (stop with ErrBuildFillsDisk) when a file
// system it writes (paths) has less free space than its diskFloor, or
// fewer free inodes than its inodeFloor, until ctx ends. A package is untrusted: a wheel of 1 MB may hold a file of
// 1 GiB of zeros, and the installers unpack it twice (the package cache,
// then the environment) without a limit of their own.
func guardDisk(ctx context.Context, stop context.CancelCauseFunc, paths []string) {
	type watched struct {
		path             string
		floor, filesLeft uint64
	}
	var ws []watched
	for _, p := range paths {
		if avail, total, freeFiles, files, ok := diskSpace(p); ok {
			w := watched{path: p, floor: diskFloor(avail, total)}
			if files > 0 {
				w.filesLeft = inodeFloor(freeFiles, files)
			}
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return
	}
	t := time.NewTicker(diskGuardEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, w := range ws {
			avail, _, freeFiles, _, ok := diskSpace(w.path)
			switch {
			case !ok:
			case avail < w.floor:
				stop(fmt.Errorf("%w: %s had %d bytes free, under the %d kept free", ErrBuildFillsDisk, w.path, avail, w.floor))
				return
			case freeFiles < w.filesLeft:
				stop(fmt.Errorf("%w: %s had %d inodes free, under the %d kept free", ErrBuildFillsDisk, w.path, freeFiles, w.filesLeft))
				return
			}
		}
	}
}

// runQuiet runs a short command (a --version, a list) and returns its
// stdout; its stderr goes into the error. It is never confined: it runs
// only the operator's own executables on nothing a user supplied (uv and
// conda --version, pyenv which, conda list and env list, which read an
// environment's metadata without running any of its code).
func runQuiet(ctx context.Context, args, env []string) ([]byte, error) {
	var stdout, stderr cappedOutput
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	killGroupOnCancel(cmd)
	if err := cmd.Run(); err != nil {
		if msg := firstLines(stderr.String(), 5); msg != "" {
			return []byte(stdout.String()), fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, msg)
		}
		return []byte(stdout.String()), fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	return []byte(stdout.String()), nil
}

// withEnv returns base with each NAME=value of set replacing any earlier
// value of NAME, and the names in unset removed.
func withEnv(base []string, set map[string]string, unset ...string) []string {
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := set[name]; ok || slices.Contains(unset, name) {
			continue
		}
		out = append(out, kv)
	}
	names := make([]string, 0, len(set))
	for name := range set {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		out = append(out, name+"="+set[name])
	}
	return out
}

// requirementArgs returns the canonical strings of reqs, for an argv.
func requirementArgs(reqs []envspec.Requirement) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.String()
	}
	return out
}

// venvActivation is the activation of a venv (also a uv venv).
func venvActivation(dir string) Activation {
	return Activation{Vars: map[string]string{"VIRTUAL_ENV": dir}, PathPrefix: []string{filepath.Join(dir, "bin")}}
}

// newInterpreterBuild starts a build, by the manager named name, of an
// environment at dir on req.Interpreter: it checks that there is an
// interpreter and that dir is new (see checkNewDir), and prepares the
// build's confinement (see newConfinement).
func newInterpreterBuild(name, dir string, req CreateRequest) (*confinement, error) {
	if req.Interpreter == "" {
		return nil, fmt.Errorf("envcache: %s: no interpreter given", name)
	}
	if err := checkNewDir(dir); err != nil {
		return nil, err
	}
	return newConfinement(req.Confine, dir)
}

// checkNewDir checks that dir is absolute and does not exist, and that its
// parent does.
func checkNewDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("envcache: %s is not an absolute path", dir)
	}
	if _, err := os.Lstat(dir); err == nil {
		return fmt.Errorf("envcache: %s already exists", dir)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("envcache: %w", err)
	}
	if fi, err := os.Stat(filepath.Dir(dir)); err != nil || !fi.IsDir() {
		return fmt.Errorf("envcache: the parent of %s is not a directory", dir)
	}
	return nil
}
