package codefiles

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
)

func TestResolveFilePath(t *testing.T) {
	t.Parallel()
	mirror := mirrorPrefix("/data/scripts", "local")
	ok := map[string]string{
		"main.py":                            "main.py",
		"main":                               "main.py",
		"data.txt":                           "data.txt.py",
		"a-b_c.1.py":                         "a-b_c.1.py",
		"codexec://files/main.py":            "main.py",
		"codexec://files/main":               "main.py",
		"/data/scripts/local/files/x.py":     "x.py",
		strings.Repeat("a", 97) + ".py":      strings.Repeat("a", 97) + ".py",
		strings.Repeat("a", 97):              strings.Repeat("a", 97) + ".py",
		"Code_01HZX0ABCDEFGHJKMNPQRSTVWX.py": "Code_01HZX0ABCDEFGHJKMNPQRSTVWX.py",
	}
	for in, want := range ok {
		got, err := resolveFilePath(in, mirror)
		if err != nil || got != want {
			t.Errorf("resolveFilePath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := map[string]string{
		"":                                     "empty",
		"../main.py":                           "'..'",
		"..":                                   "'..'",
		"a..b.py":                              "'..'",
		"/etc/passwd":                          "absolute path",
		"/data/scripts/other/files/x.py":       "absolute path",
		"/data/scripts/local/files/../../x.py": "'..'",
		"/data/scripts/local/files/sub/x.py":   "directory",
		"/data/scripts/local/files/":           "no file name",
		"/data/scripts/local/files//x.py":      "directory",
		"sub/main.py":                          "directory",
		"codexec://files/../x.py":              "'..'",
		"codexec://files/a/b.py":               "directory",
		"codexec://runs/x":                     "not a code file",
		"file:///etc/passwd":                   "not a code file",
		"a\\b.py":                              "backslash",
		"..\\..\\x.py":                         "backslash",
		"a\x00b.py":                            "NUL",
		".hidden.py":                           "starts with '.'",
		"-rf.py":                               "no code file can be named",
		"_x.py":                                "no code file can be named",
		"x_.py":                                "no code file can be named",
		"x..py":                                "'..'",
		"héllo.py":                             "contains 'é'",
		"a b.py":                               "contains ' '",
		"x.py\n":                               "contains '\\n'",
		strings.Repeat("a", 98) + ".py":        "limit is 100",
		strings.Repeat("a", 98):                "limit is 100",
		strings.Repeat("a/", 3000):             "limit is 4096",
		"./main.py":                            "directory",
		"~/main.py":                            "directory",
		"C:\\x.py":                             "backslash",
	}
	for in, want := range bad {
		got, err := resolveFilePath(in, mirror)
		if err == nil {
			t.Errorf("resolveFilePath(%q) = %q, want an error about %s", in, got, want)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("resolveFilePath(%q): %v; want it to mention %s", in, err, want)
		}
	}
	// A long name is refused for its length before anything quotes it.
	for _, in := range []string{strings.Repeat("a..", 1300), strings.Repeat("a/", 2000), strings.Repeat("\u00e9", 2000)} {
		if _, err := resolveFilePath(in, mirror); err == nil || len(err.Error()) > 200 {
			t.Errorf("resolveFilePath of %d bytes: an error of %d bytes: %.200v", len(in), len(fmt.Sprint(err)), err)
		}
	}
	// Without an on-disk copy, a mirror-looking path is just an absolute path.
	if _, err := resolveFilePath("/data/scripts/local/files/x.py", ""); err == nil {
		t.Error("a directory path was accepted with no mirror configured")
	}
}

// FuzzResolveFilePath checks that whatever a client sends, a resolved name
// is one clean path element that stays inside the session's directory.
func FuzzResolveFilePath(f *testing.F) {
	mirror := mirrorPrefix("/data/scripts", "s-0123")
	for _, s := range []string{
		"main.py", "main", "codexec://files/x.py", "/data/scripts/s-0123/files/a.py", "../x", "/etc/passwd",
		"a\\b", "a\x00b", ".x", "x_.py", strings.Repeat("a", 120), "/data/scripts/s-0123/files/../s-9/files/x.py",
		"codexec://files/..", "..py", "é.py", "/data/scripts/s-0123/files/.py",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		name, err := resolveFilePath(p, mirror)
		if err != nil {
			if name != "" {
				t.Fatalf("error %v with a name %q", err, name)
			}
			return
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || strings.Contains(name, "..") {
			t.Fatalf("resolveFilePath(%q) = %q: not a single clean element", p, name)
		}
		if len(name) > wire.MaxFilenameLen || !strings.HasSuffix(name, ".py") || name[0] == '.' {
			t.Fatalf("resolveFilePath(%q) = %q: breaks the name rules", p, name)
		}
		if wire.CleanFilename(name) != name || filepath.Base(name) != name || !filepath.IsLocal(name) {
			t.Fatalf("resolveFilePath(%q) = %q: not what initialize_code_file could create", p, name)
		}
		dir := filepath.Clean(mirror)
		if full := filepath.Join(dir, name); filepath.Dir(full) != dir {
			t.Fatalf("resolveFilePath(%q) = %q escapes %s", p, name, dir)
		}
		// Resolving is idempotent: the name resolves to itself.
		if again, err := resolveFilePath(name, mirror); err != nil || again != name {
			t.Fatalf("resolveFilePath(%q) = %q, %v; want %q", name, again, err, name)
		}
	})
}
