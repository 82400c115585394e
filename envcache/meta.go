package envcache

import (
	"cmp"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/codexec/codexec/envspec"
)

// metaVersion is the format of the metadata files.
const metaVersion = 1

// envMeta is the metadata file of a ready environment. Written last by a
// build, its presence is what makes the environment ready.
type envMeta struct {
	V           int          `json:"v"`
	ID          string       `json:"id"`
	Spec        envspec.Spec `json:"spec"`
	Interpreter string       `json:"interpreter,omitempty"`
	SizeBytes   int64        `json:"size_bytes"`
	BuiltAt     time.Time    `json:"built_at"`
	BuildMillis int64        `json:"build_ms"`
	LastUsed    time.Time    `json:"last_used"`
	Seed        string       `json:"seed,omitempty"`
}

// readAllMeta reads the metadata of every ready environment, least
// recently used first.
func (c *Cache) readAllMeta() []envMeta {
	entries, err := os.ReadDir(c.metaDir)
	if err != nil {
		return nil
	}
	var out []envMeta
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !envspec.IsID(id) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(c.metaDir, e.Name()))
		if err != nil {
			continue // evicted meanwhile
		}
		var meta envMeta
		if json.Unmarshal(data, &meta) == nil && meta.ID == id {
			out = append(out, meta)
		}
	}
	slices.SortFunc(out, func(a, b envMeta) int { return cmp.Or(a.LastUsed.Compare(b.LastUsed), cmp.Compare(a.ID, b.ID)) })
	return out
}

func (c *Cache) envDir(id string) string   { return filepath.Join(c.envsDir, id) }
func (c *Cache) metaPath(id string) string { return filepath.Join(c.metaDir, id+".json") }
func (c *Cache) lockPath(id string) string { return filepath.Join(c.locksDir, id+".lock") }

func (c *Cache) writeMeta(meta envMeta) error {
	data, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(c.metaPath(meta.ID), append(data, '\n'))
}

// writeMetaLogged rewrites the metadata of an environment in use (to
// record its last use); a failure only costs LRU precision.
func (c *Cache) writeMetaLogged(meta envMeta) {
	if err := c.writeMeta(meta); err != nil {
		c.log.Warn("record environment use", "env", meta.ID, "err", err)
	}
}
