package envcache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/codexec/codexec/envspec"
)

// uvRequirement is what FetchUV installs: uv's own wheel from the package
// index. uv is published on PyPI as a wheel holding one static executable,
// so pip can fetch it with no build step and no code run at install time.
const uvRequirement = "uv>=0.5"

// fetchTimeout bounds the whole fetch: an index that does not answer must
// not hold up a worker's start for long; the worker then goes on with pip.
const fetchTimeout = 2 * time.Minute

// ErrUVOnPath is returned by ProvideUV when there was nothing to do: uv is
// found on PATH (or the manager names its own executable), so it is used
// as it is.
var ErrUVOnPath = errors.New("envcache: uv is already available")

// ProvideUV makes the uv manager usable on a machine without uv: when the
// cache offers uv (Config.Managers holds a *UV with no Bin) and no uv is on
// PATH, it installs uv's wheel from the configured index into dir with the
// default interpreter's pip (with a venv's pip when the interpreter has
// none) and points the manager at dir/bin/uv. A dir that already holds a
// working uv is used as it is: the fetch happens once per data directory.
//
// It returns the executable it set; call it before Start and Capabilities,
// so that they see uv. ErrUVOnPath says uv needed no fetching; any other error leaves the
// manager as it was (and so unavailable: environments are then built with
// venv and pip).
func (c *Cache) ProvideUV(ctx context.Context, dir string) (string, error) {
	u, ok := c.cfg.Managers[envspec.ManagerUV].(*UV)
	if !ok || u.configuredBin() != "" {
		return "", ErrUVOnPath
	}
	if _, err := exec.LookPath("uv"); err == nil {
		return "", ErrUVOnPath
	}
	py, err := c.interpreter("")
	if err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	bin, err := fetchUV(ctx, py.path, dir, c.cfg.Index)
	if err != nil {
		return "", err
	}
	u.setBin(bin)
	return bin, nil
}

// fetchUV returns dir/bin/uv, installing it first when it does not run.
// The install goes to a fresh directory next to dir that is renamed into
// place once uv in it runs, so dir is either absent, a working uv from an
// earlier fetch, or a new one: never half written.
func fetchUV(ctx context.Context, python, dir string, idx IndexConfig) (string, error) {
	bin := filepath.Join(dir, "bin", "uv")
	if uvRuns(ctx, bin) == nil {
		return bin, nil
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	parent := filepath.Dir(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".uv-fetch-*")
	if err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	defer os.RemoveAll(tmp)
	pip, err := pipFor(ctx, python, tmp)
	if err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	target := filepath.Join(tmp, "uv")
	args := append(pip, "install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
		"--no-deps", "--target", target)
	args = append(args, idx.pipArgs()...)
	args = append(args, "--only-binary", ":all:", "--", uvRequirement)
	if _, err := runQuiet(ctx, args, installerEnv(os.Environ())); err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	if err := uvRuns(ctx, filepath.Join(target, "bin", "uv")); err != nil {
		return "", fmt.Errorf("envcache: fetching uv: the fetched uv does not run: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	if err := os.Rename(target, dir); err != nil {
		return "", fmt.Errorf("envcache: fetching uv: %w", err)
	}
	return bin, nil
}

// pipFor returns the command that runs pip for python: python -m pip when
// the interpreter has pip, else the pip of a venv made in scratch (Debian's
// python3 comes without pip, but with venv, which codexec needs anyway).
func pipFor(ctx context.Context, python, scratch string) ([]string, error) {
	env := installerEnv(os.Environ())
	if _, err := runQuiet(ctx, []string{python, "-m", "pip", "--version"}, env); err == nil {
		return []string{python, "-m", "pip"}, nil
	}
	venv := filepath.Join(scratch, "pip-venv")
	if _, err := runQuiet(ctx, []string{python, "-m", "venv", venv}, env); err != nil {
		return nil, fmt.Errorf("%s has no pip, and no venv with pip could be made: %w", python, err)
	}
	return []string{filepath.Join(venv, "bin", "python"), "-m", "pip"}, nil
}

// uvRuns checks that bin is a uv executable: uv --version prints "uv ...".
func uvRuns(ctx context.Context, bin string) error {
	ctx, cancel := context.WithTimeout(ctx, availableTimeout)
	defer cancel()
	out, err := runQuiet(ctx, []string{bin, "--version"}, installerEnv(os.Environ()))
	if err != nil {
		return err
	}
	if !strings.HasPrefix(string(out), "uv ") {
		return fmt.Errorf("%s --version printed %q", bin, firstLines(string(out), 1))
	}
	return nil
}
