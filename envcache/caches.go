package envcache

import (
	"context"
	"path/filepath"
	"time"
)

// DefaultInstallerCacheBytes is Config.InstallerCacheBytes's default.
const DefaultInstallerCacheBytes int64 = 5 << 30

// installerCachesLock is the lock file, under Config.Dir, that keeps the
// installers' caches from being emptied under a build: every build holds
// it shared while its installer runs, and emptying takes it exclusive.
const installerCachesLock = "installer-caches.lock"

// pruneInterval is the least time between two measures of the installers'
// caches: a measure walks every file in them.
const pruneInterval = time.Minute

// installerCaches returns the installers' cache directories of the
// configured managers (pip's and uv's).
func (c *Cache) installerCaches() []string {
	var dirs []string
	for _, m := range c.cfg.Managers {
		switch m := m.(type) {
		case *Venv:
			if m.PipCacheDir != "" {
				dirs = append(dirs, m.PipCacheDir)
			}
		case *UV:
			if m.CacheDir != "" {
				dirs = append(dirs, m.CacheDir)
			}
		}
	}
	return dirs
}

// holdInstallerCaches takes the installers' caches lock shared, for a
// build: the caches are not emptied until release.
func (c *Cache) holdInstallerCaches(ctx context.Context) (release func(), err error) {
	lk, err := openLock(filepath.Join(c.cfg.Dir, installerCachesLock))
	if err != nil {
		return nil, err
	}
	if err := lk.lock(ctx, false); err != nil {
		lk.close()
		return nil, err
	}
	return lk.close, nil
}

// pruneSoon empties the installers' caches in the background when they
// hold more than Config.InstallerCacheBytes of their own (PruneInstallerCaches),
// at most once per pruneInterval, and never while one runs.
func (c *Cache) pruneSoon() {
	if c.cfg.InstallerCacheBytes < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.closed || c.pruning || (!c.lastPrune.IsZero() && now.Sub(c.lastPrune) < pruneInterval) {
		return
	}
	c.pruning, c.lastPrune = true, now
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		if _, err := c.PruneInstallerCaches(c.life); err != nil && c.life.Err() == nil {
			c.log.Warn("emptying the installers' caches", "err", err)
		}
		c.mu.Lock()
		c.pruning = false
		c.mu.Unlock()
	}()
}

// PruneInstallerCaches empties pip's and uv's caches when the files only
// they hold (those not also linked into an environment: uv links its
// cache's files into the environments it builds) take more than
// Config.InstallerCacheBytes together, and returns the bytes that were
// theirs then (0 when nothing was emptied). The caches only make builds
// faster; without a bound they grew with every package ever installed,
// until the disk the sessions' files live on was full. A build in
// progress (in any process sharing Config.Dir) keeps them: they are
// emptied by a later call. Emptying renames each directory into the trash
// and deletes it from there; the next build makes it again.
func (c *Cache) PruneInstallerCaches(ctx context.Context) (int64, error) {
	limit := c.cfg.InstallerCacheBytes
	if limit < 0 {
		return 0, nil
	}
	dirs := c.installerCaches()
	var own int64
	for _, d := range dirs {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, err := ownBytes(d)
		if err != nil {
			return 0, err
		}
		own += n
	}
	if own <= limit {
		return 0, nil
	}
	lk, err := openLock(filepath.Join(c.cfg.Dir, installerCachesLock))
	if err != nil {
		return 0, err
	}
	defer lk.close()
	if ok, err := lk.tryLock(true); err != nil || !ok {
		return 0, err // a build uses them: a later call empties them
	}
	for _, d := range dirs {
		if err := c.removeDir(d); err != nil {
			return 0, err
		}
	}
	c.log.Info("installers' caches emptied", "bytes", own, "limit_bytes", limit, "dirs", dirs)
	return own, nil
}
