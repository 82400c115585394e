package envcache

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/codexec/codexec/envspec"
)

type pyVersion struct{ path, version string }

// interpreter resolves a spec's python ("" for DefaultPython) to an
// interpreter, once per value.
func (c *Cache) interpreter(version string) (pyVersion, error) {
	key := cmp.Or(version, c.cfg.DefaultPython)
	c.mu.Lock()
	py, ok := c.pythons[key]
	c.mu.Unlock()
	if ok {
		return py, nil
	}
	path, err := ResolvePython(key)
	if err != nil {
		return pyVersion{}, err
	}
	v, err := interpreterVersion(path)
	if err != nil {
		return pyVersion{}, err
	}
	py = pyVersion{path: path, version: v}
	c.mu.Lock()
	c.pythons[key] = py
	c.mu.Unlock()
	return py, nil
}

// available checks m.Available once; a success is remembered for the
// cache's life (a manager that goes away later fails its next build with
// its own error), a failure is checked again next time.
func (c *Cache) available(ctx context.Context, m Manager) error {
	c.mu.Lock()
	ok := c.ready[m.Name()]
	c.mu.Unlock()
	if ok {
		return nil
	}
	if err := m.Available(ctx); err != nil {
		return err
	}
	c.mu.Lock()
	c.ready[m.Name()] = true
	c.mu.Unlock()
	return nil
}

// probedVersions are the versions Capabilities looks for when given none.
var probedVersions = []string{"3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14"}

// Capabilities reports what this cache can build: the configured managers
// that are available, sorted, and the full versions of the interpreters
// found for versions (nil means 3.8 to 3.14) and of DefaultPython. Pool,
// Labels and Existing are the caller's to fill in.
func (c *Cache) Capabilities(ctx context.Context, versions []string) envspec.Capabilities {
	var caps envspec.Capabilities
	for name, m := range c.cfg.Managers {
		if err := m.Available(ctx); err == nil {
			caps.Managers = append(caps.Managers, name)
		} else {
			c.log.Debug("manager not available", "manager", name, "err", err)
		}
	}
	slices.Sort(caps.Managers)
	if versions == nil {
		versions = probedVersions
	}
	for _, v := range append([]string{""}, versions...) {
		if py, err := c.interpreter(v); err == nil {
			caps.Pythons = append(caps.Pythons, py.version)
		}
	}
	slices.SortFunc(caps.Pythons, compareVersions)
	caps.Pythons = slices.Compact(caps.Pythons)
	return caps
}

// compareVersions orders dotted versions numerically.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range min(len(as), len(bs)) {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		if errX != nil || errY != nil {
			if c := cmp.Compare(as[i], bs[i]); c != 0 {
				return c
			}
			continue
		}
		if c := cmp.Compare(x, y); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(as), len(bs))
}
