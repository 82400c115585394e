package envcache

import (
	"bufio"
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
)

// identifierRe matches a Python identifier in ASCII.
var identifierRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// sitePackagesDirs returns the site-packages directories of the
// environment at dir (lib/pythonX.Y/site-packages; lib64 is usually a link
// to lib and is counted once).
func sitePackagesDirs(dir string) []string {
	var out []string
	seen := map[string]bool{}
	for _, lib := range []string{"lib", "lib64"} {
		// The pattern is fixed apart from dir, which Glob takes literally
		// only when it holds no metacharacters: read the directory instead.
		entries, err := os.ReadDir(filepath.Join(dir, lib))
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "python") {
				continue
			}
			sp := filepath.Join(dir, lib, e.Name(), "site-packages")
			fi, err := os.Stat(sp)
			if err != nil || !fi.IsDir() {
				continue
			}
			real, err := filepath.EvalSymlinks(sp)
			if err != nil || seen[real] {
				continue
			}
			seen[real] = true
			out = append(out, sp)
		}
	}
	return out
}

// Installed lists the distributions installed in the environment at dir
// (a venv or a conda prefix) by reading their metadata in site-packages,
// without running Python: *.dist-info/METADATA (or *.egg-info/PKG-INFO) for
// the name and version, and top_level.txt, or else RECORD, for the import
// names. It answers for distribution names and import names alike
// (see envspec.Lookup) without running any package's import-time code. The result
// is sorted by normalised name.
//
// What it reads comes from the packages, any of which may be hostile (a
// wheel needs no build to carry a 100 MB top_level.txt that compresses to
// 100 KB), and the worker reads it, for every session that asks, in its
// own memory: every read is bounded (maxSitePackagesEntries,
// maxDistributions, maxMetadataHeaderBytes, maxTopLevelBytes,
// maxRecordBytes, maxImportNames), and what lies past a bound is left out.
func Installed(dir string) ([]envspec.Dist, error) {
	sps := sitePackagesDirs(dir)
	if len(sps) == 0 {
		return nil, fmt.Errorf("envcache: %s has no lib/python*/site-packages", dir)
	}
	// Every file is opened through root: a link a package made (conda
	// packages carry links, a source build writes what it likes) may
	// point anywhere, and the worker reads as root.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("envcache: %w", err)
	}
	defer root.Close()
	budget := &readBudget{left: maxInstalledBytes}
	var dists []envspec.Dist
	for _, abs := range sps {
		sp, err := filepath.Rel(dir, abs)
		if err != nil {
			return nil, fmt.Errorf("envcache: %w", err)
		}
		f, err := root.Open(sp)
		if err != nil {
			return nil, fmt.Errorf("envcache: %w", err)
		}
		for seen := 0; seen < maxSitePackagesEntries && len(dists) < maxDistributions; {
			entries, err := f.ReadDir(256)
			seen += len(entries)
			for _, e := range entries {
				var d envspec.Dist
				var ok bool
				switch name := e.Name(); {
				case strings.HasSuffix(name, ".dist-info") && e.IsDir():
					d, ok = readDistInfo(root, budget, filepath.Join(sp, name), "METADATA")
				case strings.HasSuffix(name, ".egg-info") && e.IsDir():
					d, ok = readDistInfo(root, budget, filepath.Join(sp, name), "PKG-INFO")
				case strings.HasSuffix(name, ".egg-info") && e.Type().IsRegular():
					d, ok = readEggInfoFile(root, budget, filepath.Join(sp, name))
				}
				if ok && len(dists) < maxDistributions {
					dists = append(dists, d)
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				f.Close()
				return nil, fmt.Errorf("envcache: %w", err)
			}
		}
		f.Close()
	}
	slices.SortFunc(dists, func(a, b envspec.Dist) int {
		return cmp.Or(cmp.Compare(envspec.NormalizeName(a.Name), envspec.NormalizeName(b.Name)), cmp.Compare(a.Version, b.Version))
	})
	return dists, nil
}

// readDistInfo reads one .dist-info or .egg-info directory. A directory
// without a readable name is skipped: it is the remains of something, not
// a distribution.
func readDistInfo(root *os.Root, budget *readBudget, info, metadataFile string) (envspec.Dist, bool) {
	f, err := openRegular(root, filepath.Join(info, metadataFile))
	if err != nil {
		return envspec.Dist{}, false
	}
	name, version := readMetadataHeaders(budget.limit(f, maxMetadataHeaderBytes))
	f.Close()
	if name == "" {
		return envspec.Dist{}, false
	}
	d := envspec.Dist{Name: name, Version: version}
	if f, err := openRegular(root, filepath.Join(info, "top_level.txt")); err == nil {
		data, _ := io.ReadAll(budget.limit(f, maxTopLevelBytes))
		f.Close()
		d.Imports = topLevelNames(string(data))
	} else if f, err := openRegular(root, filepath.Join(info, "RECORD")); err == nil {
		d.Imports = recordImports(budget.limit(f, maxRecordBytes))
		f.Close()
	}
	return d, true
}

// openRegular opens the regular file name below root, never blocking (a
// FIFO a package made in the place of a METADATA would hold the worker's
// call forever) and refusing anything else.
func openRegular(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("envcache: %s is not a regular file", name)
	}
	return f, nil
}

// Bounds on what Installed reads of an environment (see Installed). Real
// distributions stay far below them: a top_level.txt names a few modules,
// the RECORD of a large one (torch) is a few MB, a site-packages holds a
// few thousand entries.
const (
	maxSitePackagesEntries = 1 << 16 // entries of a site-packages looked at
	maxDistributions       = 4096    // distributions listed
	maxMetadataHeaderBytes = 4 << 20 // of METADATA or PKG-INFO
	maxTopLevelBytes       = 64 << 10
	maxRecordBytes         = 32 << 20
	maxImportNames         = 256 // import names of one distribution
	maxNameLen             = 256 // of a name, a version or an import name
	// maxInstalledBytes is what one Installed call reads of all files
	// together: the bounds above are per file, and an environment may
	// hold thousands of files at those bounds.
	maxInstalledBytes = 64 << 20
)

// readBudget is what is left of maxInstalledBytes.
type readBudget struct{ left int64 }

// limit returns r limited to max bytes and to what is left of b, which
// what is read through it spends.
func (b *readBudget) limit(r io.Reader, max int64) io.Reader {
	return &budgetReader{r: io.LimitReader(r, max), b: b}
}

type budgetReader struct {
	r io.Reader
	b *readBudget
}

func (br *budgetReader) Read(p []byte) (int, error) {
	if br.b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > br.b.left {
		p = p[:br.b.left]
	}
	n, err := br.r.Read(p)
	br.b.left -= int64(n)
	return n, err
}

// importNames collects the distinct import names of one distribution, at
// most maxImportNames of them.
type importNames map[string]struct{}

func (n importNames) add(name string) {
	if len(n) < maxImportNames && len(name) <= maxNameLen {
		n[name] = struct{}{}
	}
}

func (n importNames) sorted() []string {
	if len(n) == 0 {
		return nil
	}
	out := make([]string, 0, len(n))
	for name := range n {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// readEggInfoFile reads an .egg-info that is a single PKG-INFO file.
func readEggInfoFile(root *os.Root, budget *readBudget, path string) (envspec.Dist, bool) {
	f, err := openRegular(root, path)
	if err != nil {
		return envspec.Dist{}, false
	}
	defer f.Close()
	name, version := readMetadataHeaders(budget.limit(f, maxMetadataHeaderBytes))
	return envspec.Dist{Name: name, Version: version}, name != ""
}

// readMetadataHeaders reads the Name and Version headers of a core
// metadata file (RFC 822 style headers, up to the first blank line).
func readMetadataHeaders(r io.Reader) (name, version string) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			break
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok || line[0] == ' ' || line[0] == '\t' {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "name":
			if v := strings.TrimSpace(value); name == "" && len(v) <= maxNameLen {
				name = v
			}
		case "version":
			if v := strings.TrimSpace(value); version == "" && len(v) <= maxNameLen {
				version = v
			}
		}
		if name != "" && version != "" {
			break
		}
	}
	return name, version
}

// topLevelNames reads top_level.txt: one top-level name a line.
func topLevelNames(data string) []string {
	out := importNames{}
	for line := range strings.Lines(data) {
		line = strings.TrimSpace(line)
		line, _, _ = strings.Cut(line, "/") // some list a sub-package path
		if identifierRe.MatchString(line) {
			out.add(line)
		}
	}
	return out.sorted()
}

// recordImports derives import names from a RECORD (CSV of paths
// relative to site-packages): the first component of every path inside a
// directory, and the module name of every top-level .py or extension file.
func recordImports(r io.Reader) []string {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	out := importNames{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				continue
			}
			break
		}
		if len(rec) == 0 {
			continue
		}
		p := filepath.ToSlash(rec[0])
		if p == "" || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/") {
			continue // scripts in bin, data elsewhere
		}
		first, rest, nested := strings.Cut(p, "/")
		switch {
		case nested:
			if strings.HasSuffix(first, ".dist-info") || strings.HasSuffix(first, ".data") || first == "__pycache__" || rest == "" {
				continue
			}
		case strings.HasSuffix(first, ".py"):
			first = strings.TrimSuffix(first, ".py")
		case strings.HasSuffix(first, ".so") || strings.HasSuffix(first, ".pyd"):
			first, _, _ = strings.Cut(first, ".") // foo.cpython-312-x86_64-linux-gnu.so
		default:
			continue // .pth files and the like
		}
		if identifierRe.MatchString(first) {
			out.add(first)
		}
	}
	return out.sorted()
}

// dirExists reports whether path is a directory.
func dirExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
