package quota

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestParseLimits(t *testing.T) {
	l, err := ParseLimits("jobs=4, jobs_per_minute=60 workspaces=0")
	if err != nil || l.String() != "jobs=4,jobs_per_minute=60,workspaces=0" {
		t.Fatalf("%v, %v", l, err)
	}
	for _, bad := range []string{"jobs", "jobs=-1", "jobs=x", "cpu=3"} {
		if _, err := ParseLimits(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The quotas of bytes take sizes with units; a count does not.
func TestParseLimitsBytes(t *testing.T) {
	l, err := ParseLimits("code_file_bytes=64MiB,working_dir_bytes=1000000")
	if err != nil || l[CodeFileBytes] != 64<<20 || l[WorkingDirBytes] != 1000000 {
		t.Fatalf("%v, %v", l, err)
	}
	if back, err := ParseLimits(l.String()); err != nil || back.String() != l.String() {
		t.Fatalf("%q read back as %v, %v", l.String(), back, err)
	}
	for _, bad := range []string{"jobs=1MiB", "code_file_bytes=-1", "working_dir_bytes=1.5GiB", "code_file_bytes=x"} {
		if _, err := ParseLimits(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A tenant's line overrides the defaults it names, and a change of the
// file is read without a restart; a file that no longer parses keeps the
// overrides read before.
func TestTableOverridesAndReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quotas")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# big customer\nacme jobs=10\n")
	tb, err := NewTable(Limits{Jobs: 2, JobsPerMinute: 30}, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	tb.checkEvery = 0
	if tb.For("acme", Jobs) != 10 || tb.For("acme", JobsPerMinute) != 30 || tb.For("other", Jobs) != 2 || tb.For("other", Workspaces) != 0 {
		t.Fatalf("acme %d %d, other %d %d", tb.For("acme", Jobs), tb.For("acme", JobsPerMinute), tb.For("other", Jobs), tb.For("other", Workspaces))
	}
	write("acme jobs=10\nother jobs=0 workspaces=3\n")
	future := time.Now().Add(time.Minute)
	_ = os.Chtimes(path, future, future)
	if tb.For("other", Jobs) != 0 || tb.For("other", Workspaces) != 3 {
		t.Fatalf("after the file changed: other jobs=%d workspaces=%d", tb.For("other", Jobs), tb.For("other", Workspaces))
	}
	write("acme jobs=ten\n")
	_ = os.Chtimes(path, future.Add(time.Minute), future.Add(time.Minute))
	if tb.For("acme", Jobs) != 10 || tb.For("other", Workspaces) != 3 {
		t.Fatal("a file that does not parse replaced the quotas")
	}
	if _, err := NewTable(nil, path, nil); err == nil {
		t.Fatal("NewTable of a file that does not parse: no error")
	}
	var none *Table
	if none.For("acme", Jobs) != 0 {
		t.Fatal("a nil Table limits")
	}
}
