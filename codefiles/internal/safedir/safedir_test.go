//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package safedir_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/codexec/codexec/codefiles/internal/safedir"
)

func TestWriteAndRead(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	d, err := safedir.Open(base, true, "scope", "files")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.WriteFile("a.py", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt("a.py", []byte(", world"), 5); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(base, "scope", "files", "a.py"))
	if err != nil || string(got) != "hello, world" {
		t.Fatalf("content %q, %v", got, err)
	}
	if n, err := d.Size("a.py"); err != nil || n != 12 {
		t.Fatalf("Size = %d, %v", n, err)
	}
	if _, err := d.Size("missing.py"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Size of a missing file: %v", err)
	}
	if err := d.Remove("a.py"); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("a.py"); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := safedir.Open(base, false, "nope"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open of a missing directory without create: %v", err)
	}
}

func TestRefusesSymlinks(t *testing.T) {
	t.Parallel()
	base, outside := t.TempDir(), t.TempDir()
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("original"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory element that is a link is refused.
	if err := os.Symlink(outside, filepath.Join(base, "linked")); err != nil {
		t.Fatal(err)
	}
	if _, err := safedir.Open(base, true, "linked", "files"); err == nil {
		t.Fatal("Open followed a symbolic link to a directory")
	}
	d, err := safedir.Open(base, true, "real")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	link := filepath.Join(base, "real", "evil.py")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteAt("evil.py", []byte("pwned"), 0); err == nil {
		t.Fatal("WriteAt followed a symbolic link")
	}
	if _, err := d.Size("evil.py"); err == nil {
		t.Fatal("Size followed a symbolic link")
	}
	// WriteFile replaces the link itself.
	if err := d.WriteFile("evil.py", []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("link not replaced by a regular file: %v %v", fi, err)
	}
	if got, _ := os.ReadFile(target); string(got) != "original" {
		t.Fatalf("the link's target was written: %q", got)
	}
	// Remove removes a link, never its target.
	if err := os.Symlink(target, filepath.Join(base, "real", "l2.py")); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove("l2.py"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("target removed: %v", err)
	}
}

func TestRefusesBadNames(t *testing.T) {
	t.Parallel()
	d, err := safedir.Open(t.TempDir(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, name := range []string{"", ".", "..", "a/b", "../x", "a\\b", "a\x00b"} {
		if err := d.WriteFile(name, nil); !errors.Is(err, safedir.ErrBadName) {
			t.Errorf("WriteFile(%q) = %v, want ErrBadName", name, err)
		}
		if _, err := safedir.Open(t.TempDir(), true, name); !errors.Is(err, safedir.ErrBadName) {
			t.Errorf("Open(.., %q) = %v, want ErrBadName", name, err)
		}
	}
}
