package envcache

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Confiner wraps one command of a build so that it runs confined (in a
// sandbox): given the command's argv, it returns the argv to run instead.
// readOnly lists the host paths the command must be able to read besides
// the system's (/usr, /etc: a Confiner may drop those its sandbox shows
// anyway): the base interpreter's installation, the installer's
// executable, local find-links directories. writable lists the paths it
// may write: the environment being built, the installer's shared package
// cache, and a temporary directory of the build's own, which is also the
// command's HOME and TMPDIR. Every path is absolute and exists. The
// command needs the network (the package index) unless the index is
// local. A Confiner is called concurrently, by builds of different
// environments.
type Confiner func(argv []string, readOnly, writable []string) ([]string, error)

// confinedEnvNames are the variables of the worker's environment a confined
// command keeps: how to reach the network and read the system, and the
// installers' own settings. Everything else (the worker's secrets among
// it) stays out of reach of the code a package build runs.
var confinedEnvNames = []string{
	"PATH", "LANG", "LANGUAGE", "TZ", "TERM",
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"SOURCE_DATE_EPOCH",
}

// confinedEnvPrefixes are prefixes of the variables a confined command
// keeps besides confinedEnvNames.
var confinedEnvPrefixes = []string{"LC_", "PIP_", "UV_", "CONDA_", "MAMBA_"}

// confinement runs the commands of one build through a Confiner. A nil
// *confinement, or one without a Confiner, runs them as they are.
type confinement struct {
	confine Confiner
	// scratch is the build's own temporary directory: HOME and TMPDIR of
	// its commands, removed by close.
	scratch string
	// readOnly are configuration files of the worker's user that the
	// installers read from HOME, now named by a variable instead.
	readOnly []string
	// env is what confined commands get in the worker's environment's
	// place: the kept variables, HOME and TMPDIR.
	env map[string]string
}

// newConfinement prepares confined builds of the environment at dir: it
// creates dir (a sandbox can bind only what exists; every manager builds
// into an existing empty directory) and the build's scratch directory.
// With a nil confine it does nothing and returns nil.
func newConfinement(confine Confiner, dir string) (*confinement, error) {
	if confine == nil {
		return nil, nil
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("envcache: %w", err)
	}
	scratch, err := os.MkdirTemp("", "envcache-build-")
	if err != nil {
		return nil, fmt.Errorf("envcache: %w", err)
	}
	cf := &confinement{confine: confine, scratch: scratch, env: map[string]string{
		"HOME": scratch, "TMPDIR": scratch, "TMP": scratch, "TEMP": scratch,
	}}
	// The installers' per-user configuration lives in the worker's HOME,
	// which a confined command does not see: name the files instead.
	if home, err := os.UserHomeDir(); err == nil {
		userConfig := func(variable string, candidates ...string) {
			if os.Getenv(variable) != "" {
				return
			}
			for _, c := range candidates {
				p := filepath.Join(home, c)
				if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
					cf.env[variable] = p
					cf.readOnly = append(cf.readOnly, p)
					return
				}
			}
		}
		userConfig("PIP_CONFIG_FILE", ".config/pip/pip.conf", ".pip/pip.conf")
		userConfig("CONDARC", ".condarc", ".config/conda/.condarc", ".conda/.condarc")
	}
	return cf, nil
}

// close removes the scratch directory.
func (cf *confinement) close() {
	if cf != nil {
		_ = os.RemoveAll(cf.scratch)
	}
}

// command returns the argv and environment that run args (with environment
// env) confined, able to read readOnly and write writable and the scratch
// directory. Paths that do not exist are left out of the lists: what is
// missing cannot be bound, and the installer says what it missed.
func (cf *confinement) command(args, env, readOnly, writable []string) ([]string, []string, error) {
	if cf == nil || cf.confine == nil {
		return args, env, nil
	}
	existing := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			if p == "" || !filepath.IsAbs(p) {
				continue
			}
			p = filepath.Clean(p)
			if _, err := os.Stat(p); err == nil && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return out
	}
	ro := existing(append(slices.Clone(readOnly), cf.readOnly...))
	w := existing(append(slices.Clone(writable), cf.scratch))
	argv, err := cf.confine(slices.Clone(args), ro, w)
	if err != nil {
		return nil, nil, fmt.Errorf("envcache: confine %s: %w", filepath.Base(args[0]), err)
	}
	if len(argv) == 0 {
		return nil, nil, errors.New("envcache: the confiner returned no command")
	}
	return argv, confinedEnv(env, cf.env), nil
}

// confinedEnv keeps of env what confinedEnvNames and confinedEnvPrefixes
// allow and sets set.
func confinedEnv(env []string, set map[string]string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(confinedEnvNames, name) || slices.ContainsFunc(confinedEnvPrefixes, func(p string) bool {
			return strings.HasPrefix(name, p)
		}) {
			kept = append(kept, kv)
		}
	}
	return withEnv(kept, set, "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
}

// interpreterPaths returns what the interpreter python needs to read to
// run: the environment it belongs to (the directory above its bin), the
// installation its executable really lives in (links resolved), and for a
// venv's interpreter the base installation its pyvenv.cfg names.
func interpreterPaths(python string) []string {
	if !filepath.IsAbs(python) {
		return nil
	}
	prefix := func(bin string) string { return filepath.Dir(filepath.Dir(bin)) }
	paths := []string{prefix(python)}
	if real, err := filepath.EvalSymlinks(python); err == nil {
		paths = append(paths, prefix(real))
	}
	if cfg, err := os.ReadFile(filepath.Join(prefix(python), "pyvenv.cfg")); err == nil {
		for line := range strings.SplitSeq(string(cfg), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if !ok || strings.TrimSpace(k) != "home" {
				continue
			}
			if home := strings.TrimSpace(v); filepath.IsAbs(home) {
				if real, err := filepath.EvalSymlinks(home); err == nil {
					paths = append(paths, filepath.Dir(real))
				}
			}
		}
	}
	return rootless(paths)
}

// executablePaths returns the path of the executable bin (looked up on
// PATH when it is a bare name) and, when that is a link, the file it
// resolves to: what a sandbox must show for bin to run. A script's
// interpreter is not included.
func executablePaths(bin string) []string {
	p := bin
	if !strings.ContainsRune(p, '/') {
		lp, err := exec.LookPath(p)
		if err != nil {
			return nil
		}
		p = lp
	}
	p, err := filepath.Abs(p)
	if err != nil {
		return nil
	}
	paths := []string{p}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		paths = append(paths, real)
	}
	return paths
}

// localIndexPaths returns the local directories and files idx makes the
// installer read: find-links given as absolute paths, and file: URLs.
func localIndexPaths(idx IndexConfig) []string {
	var out []string
	for _, s := range slices.Concat([]string{idx.IndexURL}, idx.ExtraIndexURLs, idx.FindLinks) {
		switch {
		case filepath.IsAbs(s):
			out = append(out, s)
		case strings.HasPrefix(s, "file:"):
			if u, err := url.Parse(s); err == nil && filepath.IsAbs(u.Path) {
				out = append(out, u.Path)
			}
		}
	}
	return out
}

// rootless drops "/" from paths: a sandbox shows the system's directories
// by itself, and binding the root would show everything.
func rootless(paths []string) []string {
	return slices.DeleteFunc(paths, func(p string) bool { return filepath.Clean(p) == "/" })
}

// mkdirCaches creates the cache directories that are set, so that a
// sandbox can bind them, and returns them.
func mkdirCaches(dirs ...string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("envcache: %w", err)
		}
		out = append(out, d)
	}
	return out, nil
}
