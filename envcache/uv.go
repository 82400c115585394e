package envcache

import (
	"cmp"
	"context"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// UV is the Manager for venvs made and filled by uv: uv venv, then uv pip
// install. With CacheDir on the same file system as the environments and
// hard links (the default), a package uv has installed once is linked, not
// copied, into every later environment: building a derived environment
// from a warm cache costs tens of milliseconds and almost no disk. uv never
// downloads an interpreter here (UV_PYTHON_DOWNLOADS=never): environments
// use the interpreters the worker has.
//
// Hard links mean that a file in an environment is the same file as in
// uv's cache: a job that writes into an installed package's files in place
// changes them for every environment. Run jobs as a user that cannot write
// to the cache.
type UV struct {
	// Bin is the uv executable: a path, or a name looked up on PATH; ""
	// means "uv". A pyenv shim found on PATH is resolved once to the
	// executable behind it (pyenv which uv): a shim costs a shell and
	// pyenv on every call, and depends on the directory it runs in.
	Bin string
	// CacheDir is uv's cache (UV_CACHE_DIR); "" keeps uv's default. Put
	// it on the environments' file system so that hard links work.
	CacheDir string
	// LinkMode is how uv puts files from its cache into an environment
	// (UV_LINK_MODE); "" means "hardlink", or "copy" for a confined
	// build (see Create).
	LinkMode string

	mu          sync.Mutex
	resolved    string // bin's answer for resolvedFor
	resolvedFor string // the Bin that resolved was computed from
}

var _ Manager = (*UV)(nil)

// Name returns "uv".
func (*UV) Name() string { return envspec.ManagerUV }

// bin returns the executable to run: Bin, or uv on PATH, with a pyenv
// shim resolved once per Bin. When resolving fails, the name is run as
// given and its own error will say what is wrong.
func (u *UV) bin() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	name := cmp.Or(u.Bin, "uv")
	if u.resolved != "" && u.resolvedFor == name {
		return u.resolved
	}
	u.resolved, u.resolvedFor = name, name
	if strings.ContainsRune(name, '/') {
		return name
	}
	if p, err := exec.LookPath(name); err == nil {
		u.resolved = resolveShim(p, name)
	}
	return u.resolved
}

// setBin makes bin the executable uv commands run from now on.
func (u *UV) setBin(bin string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.Bin = bin
}

// configuredBin returns Bin.
func (u *UV) configuredBin() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.Bin
}

// resolveShim returns the executable behind a pyenv shim (a file in a
// directory called shims, with pyenv on PATH), or path itself.
func resolveShim(path, name string) string {
	if filepath.Base(filepath.Dir(path)) != "shims" {
		return path
	}
	pyenv, err := exec.LookPath("pyenv")
	if err != nil {
		return path
	}
	ctx, cancel := context.WithTimeout(context.Background(), availableTimeout)
	defer cancel()
	out, err := runQuiet(ctx, []string{pyenv, "which", name}, os.Environ())
	real := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(real) {
		return path
	}
	if fi, err := os.Stat(real); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return path
	}
	return real
}

// Available runs uv --version.
func (u *UV) Available(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, availableTimeout)
	defer cancel()
	out, err := runQuiet(ctx, []string{u.bin(), "--version"}, u.env())
	if err != nil {
		return fmt.Errorf("uv: %w", err)
	}
	if !strings.HasPrefix(string(out), "uv ") {
		return fmt.Errorf("uv: %s --version printed %q", u.bin(), firstLines(string(out), 1))
	}
	return nil
}

// Python returns dir/bin/python.
func (*UV) Python(dir string) string { return filepath.Join(dir, "bin", "python") }

// Activation sets VIRTUAL_ENV and puts dir/bin first on PATH.
func (*UV) Activation(dir string) Activation { return venvActivation(dir) }

// List reads the venv's installed distributions (see Installed).
func (*UV) List(_ context.Context, dir string) ([]envspec.Dist, error) { return Installed(dir) }

func (u *UV) env() []string {
	set := map[string]string{
		"UV_LINK_MODE":        cmp.Or(u.LinkMode, "hardlink"),
		"UV_PYTHON_DOWNLOADS": "never",
		"UV_NO_PROGRESS":      "1",
	}
	if u.CacheDir != "" {
		set["UV_CACHE_DIR"] = u.CacheDir
	}
	// Trust the system's certificate store, as pip and curl do, not only
	// uv's built-in roots: behind a TLS-inspecting proxy or a private
	// mirror with its own CA, uv otherwise fails with "invalid peer
	// certificate: UnknownIssuer" (seen on our own machines). An operator's
	// explicit choice wins.
	if os.Getenv("UV_SYSTEM_CERTS") == "" && os.Getenv("UV_NATIVE_TLS") == "" {
		set["UV_SYSTEM_CERTS"] = "1"
	}
	return withEnv(installerEnv(os.Environ()), set, "VIRTUAL_ENV", "CONDA_PREFIX", "UV_PYTHON", "UV_SYSTEM_PYTHON")
}

// Create runs uv venv --python <interpreter> dir, then uv pip install.
//
// With req.Confine, both commands run confined, reading the uv executable,
// the base interpreter's installation and the local index directories,
// and writing dir and CacheDir. uv then copies from its cache into dir
// unless LinkMode says otherwise: a sandbox binds the two separately, and
// a hard link across mounts fails (EXDEV) even on one file system; and a
// copy keeps a build, which may write dir, from changing files that other
// environments share through the cache.
func (u *UV) Create(ctx context.Context, dir string, req CreateRequest, progress io.Writer) error {
	cf, err := newInterpreterBuild("uv", dir, req)
	if err != nil {
		return err
	}
	defer cf.close()
	args := []string{u.bin(), "venv", "--no-config", "--no-project", "--no-python-downloads", "--python", req.Interpreter, dir}
	c, err := u.command(cf, args, req.Interpreter, IndexConfig{}, dir)
	if err != nil {
		return err
	}
	if _, err := runInstaller(ctx, dir, cf, c, progress); err != nil {
		return err
	}
	if _, err := ExistingVenv(dir); err != nil {
		return &BuildError{Dir: dir, Args: args, Err: err}
	}
	skel, err := venvSkeleton(dir)
	if err != nil {
		return &BuildError{Dir: dir, Args: args, Err: err}
	}
	if err := u.install(ctx, dir, cf, req.Interpreter, req.Packages, req.Index, progress); err != nil {
		return err
	}
	if err := checkSkeleton(dir, skel); err != nil {
		return &BuildError{Dir: dir, Args: []string{"uv", "pip", "install"}, Err: err}
	}
	return nil
}

// install runs uv pip install --python dir/bin/python with idx's options
// and the canonical requirement strings after "--", confined by cf.
func (u *UV) install(ctx context.Context, dir string, cf *confinement, interpreter string, reqs []envspec.Requirement, idx IndexConfig, progress io.Writer) error {
	if len(reqs) == 0 {
		return nil
	}
	args := []string{u.bin(), "pip", "install", "--no-config", "--python", u.Python(dir)}
	args = append(args, idx.pipArgs()...)
	args = append(append(args, "--"), requirementArgs(reqs)...)
	c, err := u.command(cf, args, interpreter, idx, dir)
	if err != nil {
		return err
	}
	_, err = runInstaller(ctx, dir, cf, c, progress)
	return err
}

// command describes a uv command for the environment at dir: with cf, it
// reads uv, the interpreter's installation and idx's local directories and
// writes dir and the cache.
func (u *UV) command(cf *confinement, args []string, interpreter string, idx IndexConfig, dir string) (installCmd, error) {
	c := installCmd{args: args, env: u.env()}
	if cf == nil {
		return c, nil
	}
	if u.LinkMode == "" {
		c.env = withEnv(c.env, map[string]string{"UV_LINK_MODE": "copy"})
	}
	caches, err := mkdirCaches(u.CacheDir)
	if err != nil {
		return c, err
	}
	c.readOnly = slices.Concat(executablePaths(u.bin()), interpreterPaths(interpreter), localIndexPaths(idx))
	c.writable = append([]string{dir}, caches...)
	return c, nil
}
