package envcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// seedable reports whether the venv at dir can seed another: it is a venv
// and has pip, which the child needs and does not get from venv.
func seedable(dir string) bool {
	if _, err := ExistingVenv(dir); err != nil {
		return false
	}
	for _, sp := range sitePackagesDirs(dir) {
		if fi, err := os.Stat(filepath.Join(sp, "pip")); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// copySeed copies the venv at seed into the fresh venv at dir: what dir
// already has (its pyvenv.cfg, bin/python, the activate scripts) is kept;
// everything else is hard-linked, except the scripts in bin that name the
// seed's interpreter, which are copied with the seed's path replaced by
// dir's. Symbolic links into the seed are pointed into dir. Only builds
// that are not confined are seeded (see Venv.Create).
func copySeed(seed, dir string) error {
	seedSP, dirSP := sitePackagesDirs(seed), sitePackagesDirs(dir)
	if len(seedSP) != 1 || len(dirSP) != 1 {
		return fmt.Errorf("seed %s and %s do not each have one site-packages", seed, dir)
	}
	relSeed, _ := filepath.Rel(seed, seedSP[0])
	relDir, _ := filepath.Rel(dir, dirSP[0])
	if relSeed != relDir {
		return fmt.Errorf("seed %s is for another Python (%s, not %s)", seed, relSeed, relDir)
	}
	oldPrefix, newPrefix := []byte(seed+string(filepath.Separator)), []byte(dir+string(filepath.Separator))
	return filepath.WalkDir(seed, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(seed, path)
		if err != nil || rel == "." || rel == "pyvenv.cfg" {
			return err
		}
		target := filepath.Join(dir, rel)
		if fi, err := os.Lstat(target); err == nil {
			if d.IsDir() && fi.IsDir() {
				return nil // merge into the child's own directory
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil // the child's own file wins
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if strings.HasPrefix(link, string(oldPrefix)) {
				link = string(newPrefix) + link[len(oldPrefix):]
			}
			return os.Symlink(link, target)
		case !info.Mode().IsRegular():
			return nil // sockets and the like have no place in a venv
		case filepath.Dir(rel) == "bin":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if bytes.HasPrefix(data, []byte("#!")) && bytes.Contains(data, oldPrefix) {
				return os.WriteFile(target, bytes.ReplaceAll(data, oldPrefix, newPrefix), info.Mode().Perm())
			}
		}
		return linkOrCopy(path, target, info.Mode().Perm())
	})
}

// linkOrCopy hard-links src to dst, copying when the file system will not
// link (another device, or links not permitted).
func linkOrCopy(src, dst string, perm fs.FileMode) error {
	err := os.Link(src, dst)
	if err == nil {
		return nil
	}
	var le *os.LinkError
	if !errors.As(err, &le) {
		return err
	}
	return copyFile(src, dst, perm)
}

// copyFile copies src to the new file dst.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
