package envcache

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/codexec/codexec/envspec"
)

// Defaults of Config.
const (
	DefaultBudgetBytes int64 = 20 << 30
	DefaultFailureTTL        = 2 * time.Minute
	DefaultPython            = "python3"
)

// Config configures a Cache. The zero value of every field but Dir is
// usable.
type Config struct {
	// Dir holds everything: envs/<id>/ (the environments), meta/<id>.json
	// (their metadata; present means ready), locks/<id>.lock, trash/ (what
	// is being deleted) and the installers' caches (uv-cache/, pip-cache/)
	// for the default managers. Required. Several processes may share it.
	Dir string
	// BudgetBytes is the disk the environments may use together; when a
	// build or a release leaves them above it, unused environments are
	// evicted, least recently used first. 0 means DefaultBudgetBytes (20
	// GiB); negative means no limit. Environments in use are never
	// evicted, so the cache may stay above budget while they are.
	BudgetBytes int64
	// InstallerCacheBytes bounds pip's and uv's caches (under Dir for the
	// default managers): after a build, when the files only they hold take
	// more, they are emptied (Cache.PruneInstallerCaches). 0 means
	// DefaultInstallerCacheBytes (5 GiB); negative means no limit.
	InstallerCacheBytes int64
	// FailureTTL is how long a failed build is remembered: Ensure for the
	// same environment fails at once with the same error until then. 0
	// means DefaultFailureTTL (2 minutes); negative means failures are not
	// remembered.
	FailureTTL time.Duration
	// Managers builds each kind of environment, by name ("venv", "uv",
	// "conda"). nil means all three: &Venv{PipCacheDir: Dir/pip-cache},
	// &UV{CacheDir: Dir/uv-cache} and &Conda{}. A spec whose manager is
	// missing here is refused.
	Managers map[string]Manager
	// DefaultPython is the interpreter for specs with no python: a path, a
	// command name, or a version (see ResolvePython). "" means "python3".
	DefaultPython string
	// Index says where pip and uv get packages (see IndexConfig).
	Index IndexConfig
	// AllowURLs permits "name @ https://..." packages; false refuses them.
	AllowURLs bool
	// Confine, when not nil, confines every command of every build (the
	// installers and the interpreters they start, which run the packages'
	// build scripts): see Confiner and CreateRequest.Confine. nil runs
	// them as the worker's own processes, with all its rights.
	Confine Confiner
	// Logger receives builds and evictions; nil discards.
	Logger *slog.Logger
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.BudgetBytes == 0 {
		c.BudgetBytes = DefaultBudgetBytes
	}
	if c.InstallerCacheBytes == 0 {
		c.InstallerCacheBytes = DefaultInstallerCacheBytes
	}
	if c.FailureTTL == 0 {
		c.FailureTTL = DefaultFailureTTL
	}
	if c.DefaultPython == "" {
		c.DefaultPython = DefaultPython
	}
	if c.Managers == nil && c.Dir != "" {
		c.Managers = map[string]Manager{
			envspec.ManagerVenv:  &Venv{PipCacheDir: filepath.Join(c.Dir, "pip-cache")},
			envspec.ManagerUV:    &UV{CacheDir: filepath.Join(c.Dir, "uv-cache")},
			envspec.ManagerConda: &Conda{},
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func (c Config) validate() error {
	if c.Dir == "" {
		return errors.New("no directory (Dir) given")
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("the directory (Dir) %s is not an absolute path", c.Dir)
	}
	for name, m := range c.Managers {
		if m == nil || m.Name() != name {
			return fmt.Errorf("the manager configured as %q (Managers) is not one called %q", name, name)
		}
	}
	return nil
}
