// Package quota is what each tenant may use of a codexec cluster: the
// limits by name, their defaults and per-tenant overrides, read from the
// operator's flag and file. The frontend enforces them (frontend/quotas.go)
// with counters in the state store, so that they hold across every frontend.
package quota

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codexec/codexec/internal/units"
)

// The quotas, by the name an operator writes and an error reports.
const (
	// Jobs is how many jobs of a tenant may be queued or running at once.
	Jobs = "jobs"
	// JobsPerMinute is how many jobs a tenant may submit in any minute.
	JobsPerMinute = "jobs_per_minute"
	// BuildsPerHour is how many environment builds (install_dependencies,
	// configure_environment) a tenant may ask for in any hour.
	BuildsPerHour = "builds_per_hour"
	// Workspaces is how many workspaces with a handle a tenant may hold.
	Workspaces = "workspaces"
	// CodeFileBytes is how many bytes a tenant's code files may take, over
	// all its workspaces.
	CodeFileBytes = "code_file_bytes"
	// WorkingDirBytes is how many bytes a tenant's working directories may
	// take, over all its workspaces, before its jobs that write are refused.
	WorkingDirBytes = "working_dir_bytes"
	// ResultBytes is how many bytes the results of a tenant's jobs may take
	// where results are kept (for the results' retention, --retention)
	// before its next jobs are refused.
	ResultBytes = "result_bytes"
)

// Names lists every quota.
var Names = []string{Jobs, JobsPerMinute, BuildsPerHour, Workspaces, CodeFileBytes, WorkingDirBytes, ResultBytes}

// Limits are a tenant's quotas: name → limit, 0 (or absent) for none.
type Limits map[string]int

// ParseLimits reads "name=N,name=N" (commas or spaces between). N is a
// non-negative integer, 0 meaning no limit; a quota of bytes (name ending
// in _bytes) may also be given with a unit, as in 512MiB or 2GB.
func ParseLimits(s string) (Limits, error) {
	l := Limits{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		name, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("quota %q: want name=N", f)
		}
		if !slices.Contains(Names, name) {
			return nil, fmt.Errorf("quota %q: unknown name %q (known: %s)", f, name, strings.Join(Names, ", "))
		}
		if strings.HasSuffix(name, "_bytes") {
			n, err := units.ParseSize(v)
			if err != nil {
				return nil, fmt.Errorf("quota %q: %q is not a size (e.g. 1048576, 512MiB, 2GiB; 0 for no limit)", f, v)
			}
			l[name] = int(n)
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("quota %q: %q is not a count (0 for no limit)", f, v)
		}
		l[name] = n
	}
	return l, nil
}

// String writes l as ParseLimits reads it, in the order of Names.
func (l Limits) String() string {
	var parts []string
	for _, n := range Names {
		if v, ok := l[n]; ok {
			parts = append(parts, n+"="+strconv.Itoa(v))
		}
	}
	return strings.Join(parts, ",")
}

// Table is every tenant's quotas: the defaults, and the overrides of a
// file whose lines are
//
//	TENANT name=N name=N ...
//
// (blank lines and lines starting with # ignored): a name a line does not
// give keeps its default. The file is read again, at most every CheckEvery,
// when its modification time or size changed; a file that no longer parses
// keeps the overrides already read, and is logged. A nil Table has no
// limits.
type Table struct {
	defaults   Limits
	path       string
	checkEvery time.Duration
	log        *slog.Logger

	mu        sync.RWMutex
	tenants   map[string]Limits
	stamp     [2]int64 // modification time (ns) and size of the file read
	lastCheck atomic.Int64
}

// DefaultCheckEvery is how often a Table looks at its file.
const DefaultCheckEvery = time.Second

// NewTable returns the Table of defaults and, when path is not "", the
// overrides of that file (which must parse now).
func NewTable(defaults Limits, path string, log *slog.Logger) (*Table, error) {
	if log == nil {
		log = slog.Default()
	}
	t := &Table{defaults: defaults, path: path, checkEvery: DefaultCheckEvery, log: log, tenants: map[string]Limits{}}
	if path != "" {
		if err := t.Reload(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// Reload reads the file again. On error the overrides are left as they were.
func (t *Table) Reload() error {
	st, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("quota file: %w", err)
	}
	data, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("quota file: %w", err)
	}
	tenants, err := parseFile(data)
	if err != nil {
		return fmt.Errorf("quota file %s: %w", t.path, err)
	}
	t.mu.Lock()
	t.tenants, t.stamp = tenants, [2]int64{st.ModTime().UnixNano(), st.Size()}
	t.mu.Unlock()
	return nil
}

func parseFile(data []byte) (map[string]Limits, error) {
	tenants := map[string]Limits{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tenant, rest, _ := strings.Cut(line, " ")
		l, err := ParseLimits(rest)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if _, dup := tenants[tenant]; dup {
			return nil, fmt.Errorf("line %d: tenant %q given twice", n, tenant)
		}
		tenants[tenant] = l
	}
	return tenants, sc.Err()
}

// For returns tenant's limit of quota name (0: none).
func (t *Table) For(tenant, name string) int {
	if t == nil {
		return 0
	}
	t.maybeReload()
	t.mu.RLock()
	defer t.mu.RUnlock()
	if v, ok := t.tenants[tenant][name]; ok {
		return v
	}
	return t.defaults[name]
}

// maybeReload reloads the file when CheckEvery has passed since the last
// look and it changed.
func (t *Table) maybeReload() {
	if t.path == "" {
		return
	}
	now := time.Now().UnixNano()
	last := t.lastCheck.Load()
	if now-last < int64(t.checkEvery) || !t.lastCheck.CompareAndSwap(last, now) {
		return
	}
	st, err := os.Stat(t.path)
	if err != nil {
		t.log.Warn("quota file unreadable; keeping the quotas read before", "path", t.path, "err", err)
		return
	}
	t.mu.RLock()
	same := t.stamp == [2]int64{st.ModTime().UnixNano(), st.Size()}
	t.mu.RUnlock()
	if same {
		return
	}
	if err := t.Reload(); err != nil {
		t.log.Warn("quota file does not parse; keeping the quotas read before", "err", err)
		return
	}
	t.log.Info("quota file reloaded", "path", t.path)
}
