package envcache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/internal/telemetry"
)

// Usage returns the disk the ready environments occupy together, as
// measured after their builds.
func (c *Cache) Usage() int64 {
	var total int64
	for _, m := range c.readAllMeta() {
		total += m.SizeBytes
	}
	return total
}

// trimSoon starts a Trim in the background, unless one is running (which
// then runs once more).
func (c *Cache) trimSoon() {
	if c.budget.Load() < 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.trimming {
		c.trimAgain = true
		return
	}
	c.trimming = true
	c.background.Add(1)
	go func() {
		defer c.background.Done()
		for {
			if _, err := c.Trim(c.life); err != nil && c.life.Err() == nil {
				c.log.Warn("evicting environments", "err", err)
			}
			c.mu.Lock()
			if !c.trimAgain {
				c.trimming = false
				c.mu.Unlock()
				return
			}
			c.trimAgain = false
			c.mu.Unlock()
		}
	}()
}

// Trim evicts unused environments, least recently used first, until the
// ready ones fit in Config.BudgetBytes, and returns the IDs it evicted.
// An environment held by any process, or being built, is skipped. The
// cache calls it after each build and each last release; call it to evict
// on demand.
func (c *Cache) Trim(ctx context.Context) ([]string, error) {
	budget := c.budget.Load()
	if budget < 0 {
		return nil, nil
	}
	c.trimMu.Lock()
	defer c.trimMu.Unlock()
	metas := c.readAllMeta()
	var total int64
	for _, m := range metas {
		total += m.SizeBytes
	}
	var evicted []string
	for _, m := range metas {
		if total <= budget {
			break
		}
		if err := ctx.Err(); err != nil {
			return evicted, err
		}
		ok, err := c.evict(m.ID)
		if err != nil {
			return evicted, err
		}
		if ok {
			total -= m.SizeBytes
			evicted = append(evicted, m.ID)
			telemetry.EnvEvicted()
			c.log.Info("environment evicted", "env", m.ID, "size_bytes", m.SizeBytes, "last_used", m.LastUsed)
		}
	}
	if total > budget {
		c.log.Warn("environments in use exceed the disk budget", "usage_bytes", total, "budget_bytes", budget)
	}
	return evicted, nil
}

// evict removes id if no one uses it, reporting whether it did.
func (c *Cache) evict(id string) (bool, error) {
	busy := func() bool {
		h := c.held[id]
		return (h != nil && h.refs > 0) || c.flights[id] != nil
	}
	c.mu.Lock()
	b := busy()
	c.mu.Unlock()
	if b {
		return false, nil
	}
	lk, err := openLock(c.lockPath(id))
	if err != nil {
		return false, err
	}
	defer lk.close()
	if ok, err := lk.tryLock(true); err != nil || !ok {
		return false, err // in use by another process, or being built
	}
	c.mu.Lock()
	if busy() { // taken by this process since we looked
		c.mu.Unlock()
		return false, nil
	}
	delete(c.held, id)
	c.mu.Unlock()
	// The metadata goes first: without it the environment is not ready,
	// whatever remains of its directory.
	if err := os.Remove(c.metaPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("envcache: evict %s: %w", id, err)
	}
	trash := c.toTrash(c.envDir(id))
	if trash != c.envDir(id) {
		lk.close() // it is out of the way: no one needs to wait for the deletion
	}
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("envcache: remove %s: %w", trash, err)
	}
	return true, nil
}

// removeDir moves dir into the trash and deletes it from there.
func (c *Cache) removeDir(dir string) error {
	trash := c.toTrash(dir)
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("envcache: remove %s: %w", trash, err)
	}
	return nil
}

// toTrash moves dir into the trash (a rename: at once, so dir is gone) and
// returns what to delete: the trash entry, or dir itself when it could not
// be moved, or "" when there is no dir.
func (c *Cache) toTrash(dir string) string {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	trash, err := os.MkdirTemp(c.trashDir, filepath.Base(dir)+"-")
	if err != nil {
		return dir
	}
	if err := os.Rename(dir, filepath.Join(trash, "env")); err != nil {
		os.Remove(trash)
		return dir
	}
	return trash
}

// sweep removes what interrupted builds and evictions left: the trash,
// environment directories without metadata, metadata without a directory.
// Each under its exclusive lock, taken only if free.
func (c *Cache) sweep() {
	if entries, err := os.ReadDir(c.trashDir); err == nil {
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(c.trashDir, e.Name()))
		}
	}
	ids := map[string]bool{}
	if entries, err := os.ReadDir(c.envsDir); err == nil {
		for _, e := range entries {
			ids[e.Name()] = true
		}
	}
	if entries, err := os.ReadDir(c.metaDir); err == nil {
		for _, e := range entries {
			if id, ok := strings.CutSuffix(e.Name(), ".json"); ok {
				ids[id] = true
			}
		}
	}
	for id := range ids {
		if !envspec.IsID(id) {
			continue
		}
		_, metaErr := os.Stat(c.metaPath(id))
		_, dirErr := os.Stat(c.envDir(id))
		if (metaErr == nil) == (dirErr == nil) {
			continue
		}
		lk, err := openLock(c.lockPath(id))
		if err != nil {
			continue
		}
		if ok, _ := lk.tryLock(true); ok {
			// Re-check under the lock: a build may have finished.
			_, metaErr = os.Stat(c.metaPath(id))
			_, dirErr = os.Stat(c.envDir(id))
			if metaErr != nil && dirErr == nil {
				c.log.Info("removing the remains of an interrupted build", "env", id)
				_ = c.removeDir(c.envDir(id))
			} else if metaErr == nil && dirErr != nil {
				_ = os.Remove(c.metaPath(id))
			}
		}
		lk.close()
	}
}
