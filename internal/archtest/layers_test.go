package archtest

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/codexec/codexec/"

// layers gives every package of the module its layer, lowest first. The
// same table, as a drawing, is in docs/architecture.md.
var layers = map[string]int{
	// 0: vocabularies and contracts that import nothing of ours.
	"envspec":            0,
	"internal/lifecycle": 0,
	"internal/units":     0,
	"internal/connlimit": 0, // the HTTP listener's bound on connections
	"internal/mountinfo": 0, // /proc/<pid>/mountinfo fields
	"internal/archtest":  0, // this test

	// 1: the wire vocabulary, the state store, mechanisms with one job each.
	"wire":                       1,
	"statestore":                 1,
	"codefiles/internal/safedir": 1,
	"worker/sandbox":             1,
	"worker/cgroup":              1,
	"worker/seccomp":             1,
	"worker/workspace":           1,
	"worker/diskfs":              1,
	"worker/gpu":                 1,
	"frontend/auth":              1,
	"internal/telemetry":         1, // metrics and health endpoints; imports nothing of ours
	"frontend/quota":             1,

	// 2: what the roles are built from.
	"broker":        2,
	"codefiles":     2,
	"envcache":      2,
	"worker/runner": 2,

	// 3: the operator's limit sets, expressed in the runner's rlimits.
	"worker/limits": 3,

	// 4: the roles.
	"frontend": 4,
	"worker":   4,

	// 5: the end-to-end harness: it starts whole codexec processes and
	// talks MCP to them, for the e2e tests and the benchmark; and the
	// flags, read from the environment, of the benchmark and the command
	// line.
	"cmd/codexec/internal/e2e":     5,
	"cmd/codexec/internal/flagenv": 5,

	// 6: the benchmark, and the status view of a cluster.
	"cmd/codexec/internal/bench":  6,
	"cmd/codexec/internal/status": 6,
	// 6: the batch client.
	"cmd/codexec/internal/batch": 6,

	// 7: the command line; 8: the binary.
	"cmd/codexec/internal/cli": 7,
	"cmd/codexec":              8,
}

// testHarnesses may be imported by test files of any package: they start
// real services (redis-server, JetStream), check contracts or write
// fixtures (wheels).
var testHarnesses = map[string]bool{
	"statestore/redistest":             true,
	"statestore/storetest":             true,
	"broker/brokertest":                true,
	"internal/lifecycle/lifecycletest": true,
	"internal/wheeltest":               true,
	"internal/memtest":                 true,
	"frontend/auth/authtest":           true,
	"cmd/codexec/internal/e2e":         true,
	"worker/gpu/gputest":               true,
}

func TestPackagesFormLayers(t *testing.T) {
	root := repoRoot(t)
	imports := map[string]map[string]bool{}     // package → our packages its non-test files import
	testImports := map[string]map[string]bool{} // the same, for test files
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		into := imports
		if strings.HasSuffix(path, "_test.go") {
			into = testImports
		}
		if into[pkg] == nil {
			into[pkg] = map[string]bool{}
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if dep, ok := strings.CutPrefix(p, module); ok {
				into[pkg][dep] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var pkgs []string
	for p := range imports {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		if testHarnesses[pkg] && pkg != "cmd/codexec/internal/e2e" {
			continue // harnesses sit beside what they test
		}
		l, ok := layers[pkg]
		if !ok {
			t.Errorf("package %s has no layer: give it one in the table of this test and in docs/architecture.md", pkg)
			continue
		}
		for dep := range imports[pkg] {
			if dep == pkg || strings.HasPrefix(dep, pkg+"/") && testHarnesses[dep] {
				continue
			}
			dl, ok := layers[dep]
			if !ok && testHarnesses[dep] {
				t.Errorf("%s imports the test harness %s outside its tests", pkg, dep)
				continue
			}
			if ok && dl >= l {
				t.Errorf("%s (layer %d) imports %s (layer %d): a package may import only lower layers", pkg, l, dep, dl)
			}
		}
	}
	for pkg, deps := range testImports {
		l, ok := layers[pkg]
		if !ok {
			continue
		}
		for dep := range deps {
			if dep == pkg || testHarnesses[dep] {
				continue
			}
			if dl, ok := layers[dep]; ok && dl > l {
				t.Errorf("tests of %s (layer %d) import %s (layer %d), a higher layer", pkg, l, dep, dl)
			}
		}
	}
	for pkg := range layers {
		if _, ok := imports[pkg]; !ok {
			t.Errorf("the table names %s, which does not exist", pkg)
		}
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}
