package envcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ErrInterpreterReplaced is wrapped by the error of a build in which a
// package replaced a file that decides which interpreter and standard
// library the environment runs (see venvSkeleton).
var ErrInterpreterReplaced = errors.New("envcache: a package replaced the environment's interpreter or its pyvenv.cfg")

// interpreterNameRe matches the names venv and uv give the interpreter in
// bin: python, python3, python3.12.
var interpreterNameRe = regexp.MustCompile(`^python[0-9.]*$`)

// venvSkeleton describes what of a venv decides which program its
// interpreter is and where that program takes its standard library from:
// pyvenv.cfg (its home) and bin/python*, by path, as a link's target or a
// file's digest. The worker starts the environment's interpreter as root
// (its zygote, with the capabilities that set up every job's sandbox), so a
// package must not change them: a wheel's data files land in the
// environment's directory, and pip installs them over bin/python (a script
// named python) and, like uv, over pyvenv.cfg (whose home then names a
// standard library of the package's choosing, whose encodings module the
// interpreter imports before anything else, -S or not).
func venvSkeleton(dir string) (map[string]string, error) {
	out := map[string]string{}
	names := []string{"pyvenv.cfg"}
	entries, err := os.ReadDir(filepath.Join(dir, "bin"))
	if err != nil {
		return nil, fmt.Errorf("envcache: %w", err)
	}
	for _, e := range entries {
		if interpreterNameRe.MatchString(e.Name()) {
			names = append(names, filepath.Join("bin", e.Name()))
		}
	}
	for _, rel := range names {
		p := filepath.Join(dir, rel)
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out[rel] = "absent"
		case err != nil:
			return nil, fmt.Errorf("envcache: %w", err)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("envcache: %w", err)
			}
			out[rel] = "link " + target
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("envcache: %w", err)
			}
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %o %s", fi.Mode().Perm(), hex.EncodeToString(sum[:]))
		default:
			out[rel] = "other " + fi.Mode().String()
		}
	}
	return out, nil
}

// checkSkeleton fails, naming what changed, when dir's venvSkeleton is no
// longer before (taken after the venv was made, before any package went
// in).
func checkSkeleton(dir string, before map[string]string) error {
	after, err := venvSkeleton(dir)
	if err != nil {
		return err
	}
	var changed []string
	for rel, was := range before {
		if after[rel] != was {
			changed = append(changed, rel)
		}
	}
	for rel := range after {
		if _, ok := before[rel]; !ok {
			changed = append(changed, rel)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	slices.Sort(changed)
	return fmt.Errorf("%w: %s changed while the packages were installed", ErrInterpreterReplaced, strings.Join(changed, ", "))
}
