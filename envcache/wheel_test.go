package envcache

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testWheel describes a tiny pure-Python wheel that tests write by hand: a
// wheel is a zip of the package's files and a .dist-info directory.
type testWheel struct {
	dist     string   // distribution name, as in METADATA
	version  string   // "1.0"
	module   string   // the package directory it provides
	single   string   // a top-level single-file module it also provides
	requires []string // Requires-envspec.Dist
	topLevel bool     // write top_level.txt (else import names come from RECORD)
}

// write writes the wheel into dir and returns its path.
func (w testWheel) write(tb testing.TB, dir string) string {
	tb.Helper()
	base := strings.ReplaceAll(envspec.NormalizeName(w.dist), "-", "_")
	info := fmt.Sprintf("%s-%s.dist-info", base, w.version)
	files := [][2]string{
		{w.module + "/__init__.py", fmt.Sprintf("VALUE = %q\n", w.dist+" "+w.version)},
	}
	if w.single != "" {
		files = append(files, [2]string{w.single + ".py", "SINGLE = True\n"})
	}
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: a test package\n", w.dist, w.version)
	for _, r := range w.requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files = append(files,
		[2]string{info + "/METADATA", meta + "\nA long description that is not a header.\nName: not-this\n"},
		[2]string{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: codexec-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	)
	if w.topLevel {
		files = append(files, [2]string{info + "/top_level.txt", w.module + "\n"})
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString(info + "/RECORD,,\n")
	files = append(files, [2]string{info + "/RECORD", record.String()})

	path := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", base, w.version))
	out, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	zw := zip.NewWriter(out)
	for _, f := range files {
		fw, err := zw.Create(f[0])
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := fw.Write([]byte(f[1])); err != nil {
			tb.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := out.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// testWheels are the packages of the test wheelhouse:
//   - alpha needs gamma, so installing alpha exercises dependency
//     resolution;
//   - scikit-fake provides the import name skfake (top_level.txt), like
//     scikit-learn provides sklearn;
//   - Odd_Name has no top_level.txt: its import names (oddmod, oddsingle)
//     come from RECORD;
//   - beta exists in two versions, for replacement.
var testWheels = []testWheel{
	{dist: "alpha", version: "1.0", module: "alpha", requires: []string{"gamma>=1.0"}, topLevel: true},
	{dist: "gamma", version: "1.0", module: "gamma", topLevel: true},
	{dist: "beta", version: "1.0", module: "beta", topLevel: true},
	{dist: "beta", version: "2.0", module: "beta", topLevel: true},
	{dist: "scikit-fake", version: "1.0", module: "skfake", topLevel: true},
	{dist: "Odd_Name", version: "0.3", module: "oddmod", single: "oddsingle"},
}

// setupWheelhouse writes the test wheels into a new directory.
func setupWheelhouse(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, w := range testWheels {
		w.write(tb, dir)
	}
	return dir
}

// wheelhouseIndex installs from the wheelhouse only: no network.
func wheelhouseIndex(dir string) IndexConfig {
	return IndexConfig{NoIndex: true, FindLinks: []string{dir}}
}
