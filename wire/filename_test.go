package wire

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestCleanFilename(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":                       "script.py",
		"main.py":                "main.py",
		"main":                   "main.py",
		"analysis_v2.py":         "analysis_v2.py",
		"../../etc/passwd":       "etc_passwd.py",
		"/abs/path/x.py":         "abs_path_x.py",
		`..\..\win.py`:           "win.py",
		"a\x00b.py":              "a_b.py",
		".bashrc":                "bashrc.py",
		"--help":                 "help.py",
		"héllo wörld.py":         "h_llo_w_rld.py",
		"$(rm -rf ~).py":         "rm_-rf.py",
		"...":                    "script.py",
		"a..b.py":                "a._b.py",
		strings.Repeat("x", 500): strings.Repeat("x", MaxFilenameLen-3) + ".py",
	}
	for in, want := range cases {
		if got := CleanFilename(in); got != want {
			t.Errorf("CleanFilename(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzCleanFilename(f *testing.F) {
	for _, s := range []string{"", "a.py", "../x", "/etc/shadow", "a\x00b", "..", "\\\\server\\share", "日本語.py"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got := CleanFilename(in)
		if len(got) > MaxFilenameLen || len(got) < 4 || !strings.HasSuffix(got, ".py") {
			t.Fatalf("CleanFilename(%q) = %q: bad length or suffix", in, got)
		}
		if got != filepath.Base(got) || strings.Contains(got, "..") || strings.HasPrefix(got, ".") || strings.HasPrefix(got, "-") {
			t.Fatalf("CleanFilename(%q) = %q: not a safe single path element", in, got)
		}
		for _, r := range got {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
				t.Fatalf("CleanFilename(%q) = %q: unexpected rune %q", in, got, r)
			}
		}
		if CleanFilename(got) != got {
			t.Fatalf("CleanFilename not idempotent on %q", got)
		}
	})
}
