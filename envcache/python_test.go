package envcache

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// versionOf asks the interpreter at p for its major.minor version.
func versionOf(t *testing.T, p string) string {
	t.Helper()
	out, err := exec.Command(p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").Output()
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return strings.TrimSpace(string(out))
}

func TestResolvePythonFromEnvironment(t *testing.T) {
	t.Parallel()
	py, err := ResolvePython("python3")
	if err != nil {
		t.Skipf("no python3 on PATH: %v", err)
	}
	if !filepath.IsAbs(py) {
		t.Errorf("ResolvePython(python3) = %s, want an absolute path", py)
	}
	// The version python3 has must resolve too (3.11 on the CI machines).
	version := versionOf(t, py)
	got, err := ResolvePython(version)
	if err != nil {
		t.Fatalf("ResolvePython(%s): %v", version, err)
	}
	if v := versionOf(t, got); v != version {
		t.Errorf("ResolvePython(%s) = %s, which is Python %s", version, got, v)
	}
	// A path is used as is.
	if again, err := ResolvePython(got); err != nil || again != got {
		t.Errorf("ResolvePython(%s) = %s, %v", got, again, err)
	}
}

func TestResolvePythonFromPyenv(t *testing.T) {
	t.Parallel()
	root := os.Getenv("PYENV_ROOT")
	if root == "" {
		home, _ := os.UserHomeDir()
		root = filepath.Join(home, ".pyenv")
	}
	found, _ := filepath.Glob(filepath.Join(root, "versions", "3.*", "bin", "python3"))
	if len(found) == 0 {
		t.Skip("no pyenv Python 3 installed")
	}
	version := versionOf(t, found[0])
	// An empty PATH leaves pyenv's directory as the only place to look.
	got, err := resolver{pyenvRoot: root}.resolve(version)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got, filepath.Join(root, "versions", version+".")) || versionOf(t, got) != version {
		t.Errorf("resolve(%s) = %s", version, got)
	}
}

func TestResolvePythonNotFound(t *testing.T) {
	t.Parallel()
	_, err := ResolvePython("9.99")
	if !errors.Is(err, ErrPythonNotFound) {
		t.Fatalf("err = %v, want ErrPythonNotFound", err)
	}
	for _, want := range []string{"Python 9.99", "python9.99 on PATH", filepath.Join("versions", "9.99.*", "bin", "python9")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
}

// fakePython writes a script that answers the probe as an interpreter at exe
// of the given version would.
func fakePython(t *testing.T, path, exe, version string) {
	t.Helper()
	fakeInterpreter(t, path, "echo "+exe+"\necho "+version+"\n")
}

func TestResolvePythonCandidates(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "bin")
	root := filepath.Join(tmp, "pyenv")

	// A pyenv shim for a version that is not selected: on PATH, but broken.
	fakeInterpreter(t, filepath.Join(bin, "python3.12"), "echo 'pyenv: python3.12: command not found' >&2\nexit 127\n")
	// A python3.10 on PATH that is in truth another version.
	fakePython(t, filepath.Join(bin, "python3.10"), "/usr/bin/python3.9", "3.9.2")
	// A working shim that reports the real interpreter.
	fakePython(t, filepath.Join(bin, "python3"), "/opt/python/3.11.4/bin/python3.11", "3.11.4")
	// Three installed 3.12s; 3.12.10 is the newest.
	for _, v := range []string{"3.12.1", "3.12.10", "3.12.9"} {
		fakePython(t, filepath.Join(root, "versions", v, "bin", "python3"), filepath.Join(root, "versions", v, "bin", "python3.12"), v)
	}
	fakePython(t, filepath.Join(root, "versions", "3.10.4", "bin", "python3"), filepath.Join(root, "versions", "3.10.4", "bin", "python3.10"), "3.10.4")
	// Not executable: ignored by the PATH lookup.
	if err := os.WriteFile(filepath.Join(bin, "python3.13"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := resolver{path: "relative/dir::" + bin, pyenvRoot: root}

	for _, tt := range []struct{ in, want string }{
		{"python3", "/opt/python/3.11.4/bin/python3.11"},
		{"3", "/opt/python/3.11.4/bin/python3.11"},
		{"3.12", filepath.Join(root, "versions", "3.12.10", "bin", "python3.12")},
		{"3.12.9", filepath.Join(root, "versions", "3.12.9", "bin", "python3.12")},
		{"3.10", filepath.Join(root, "versions", "3.10.4", "bin", "python3.10")},
	} {
		got, err := r.resolve(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("resolve(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}

	_, err := r.resolve("3.12.5")
	if !errors.Is(err, ErrPythonNotFound) {
		t.Fatalf("resolve(3.12.5): err = %v, want ErrPythonNotFound", err)
	}
	for _, want := range []string{"command not found", "3.12.5.*/bin/python3: no match"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("resolve(3.12.5) error does not say %q: %v", want, err)
		}
	}
	// A version is looked up by its own name, not as whatever python3 is.
	if got, err := r.resolve("3.11"); !errors.Is(err, ErrPythonNotFound) {
		t.Errorf("resolve(3.11) = %s, %v; want ErrPythonNotFound", got, err)
	}
	_, err = r.resolve("3.13")
	if !errors.Is(err, ErrPythonNotFound) || !strings.Contains(err.Error(), "python3.13 on PATH: not found") {
		t.Errorf("resolve(3.13): err = %v; a non-executable file is not an interpreter", err)
	}
	_, err = r.resolve("python3.12")
	if !errors.Is(err, ErrPythonNotFound) || !strings.Contains(err.Error(), "command not found") {
		t.Errorf("resolve(python3.12): err = %v, want the shim's own complaint", err)
	}
}

func TestResolvePythonPaths(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	exe := fakeInterpreter(t, filepath.Join(tmp, "python"), "exit 0\n")
	plain := filepath.Join(tmp, "not-executable")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := ResolvePython(exe); err != nil || got != exe {
		t.Errorf("ResolvePython(%s) = %s, %v", exe, got, err)
	}
	for _, p := range []string{plain, tmp, filepath.Join(tmp, "missing")} {
		if _, err := ResolvePython(p); !errors.Is(err, ErrPythonNotFound) {
			t.Errorf("ResolvePython(%s): err = %v, want ErrPythonNotFound", p, err)
		}
	}
}

func TestResolvePythonRejectsOddNames(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "-c", "python3; rm -rf /", "python 3", "$(id)", "3.12.1.4", ".3"} {
		if got, err := ResolvePython(s); err == nil {
			t.Errorf("ResolvePython(%q) = %s, want an error", s, got)
		}
	}
}
