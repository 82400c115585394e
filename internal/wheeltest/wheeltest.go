// Package wheeltest writes tiny pure-Python wheels for tests, so that tests
// can install packages with real installers (uv, pip) and no network. A
// wheel is a zip of the package's files and a .dist-info directory; the
// ones written here hold a package whose VALUE is "<dist> <version>".
package wheeltest

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codexec/codexec/envspec"
)

// Wheel describes a wheel to write.
type Wheel struct {
	Dist     string   // distribution name, as in METADATA
	Version  string   // "1.0"
	Module   string   // the package directory it provides
	Single   string   // a top-level single-file module it also provides
	Requires []string // Requires-Dist
	TopLevel bool     // write top_level.txt (else import names come from RECORD)
	// Extra are further files: their path in the wheel and their content
	// (a large native library, say).
	Extra [][2]string
}

// Write writes the wheel into dir and returns its path. Its METADATA has a
// description after the headers, with a line that looks like a header, as
// real ones may.
func (w Wheel) Write(tb testing.TB, dir string) string {
	tb.Helper()
	base := strings.ReplaceAll(envspec.NormalizeName(w.Dist), "-", "_")
	info := fmt.Sprintf("%s-%s.dist-info", base, w.Version)
	files := [][2]string{
		{w.Module + "/__init__.py", fmt.Sprintf("VALUE = %q\n", w.Dist+" "+w.Version)},
	}
	if w.Single != "" {
		files = append(files, [2]string{w.Single + ".py", "SINGLE = True\n"})
	}
	files = append(files, w.Extra...)
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: a test package\n", w.Dist, w.Version)
	for _, r := range w.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files = append(files,
		[2]string{info + "/METADATA", meta + "\nA long description that is not a header.\nName: not-this\n"},
		[2]string{info + "/WHEEL", "Wheel-Version: 1.0\nGenerator: codexec-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	)
	if w.TopLevel {
		files = append(files, [2]string{info + "/top_level.txt", w.Module + "\n"})
	}
	var record strings.Builder
	for _, f := range files {
		sum := sha256.Sum256([]byte(f[1]))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f[0], base64.RawURLEncoding.EncodeToString(sum[:]), len(f[1]))
	}
	record.WriteString(info + "/RECORD,,\n")
	files = append(files, [2]string{info + "/RECORD", record.String()})

	path := filepath.Join(dir, fmt.Sprintf("%s-%s-py3-none-any.whl", base, w.Version))
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
