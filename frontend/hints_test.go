package frontend

import (
	"strings"
	"testing"
)

// A job that failed on an import its environment lacks says, in its text,
// what to install: the module's distribution where its name on PyPI is
// another (cv2 is opencv-python). Nothing is added to any other result.
func TestMissingModuleHint(t *testing.T) {
	tb := "Traceback (most recent call last):\n  File \"script.py\", line 1, in <module>\n"
	for _, tc := range []struct {
		name string
		er   ExecResult
		want string // "" for no hint
	}{
		{"cv2", ExecResult{Status: "error", Stderr: tb + "ModuleNotFoundError: No module named 'cv2'\n"}, `packages ["opencv-python"]`},
		{"submodule", ExecResult{Status: "error", Stderr: tb + "ModuleNotFoundError: No module named 'sklearn.linear_model'\n"}, `no module "sklearn.linear_model" in this environment; if it is a package, install_dependencies with packages ["scikit-learn"]`},
		{"same name", ExecResult{Status: "error", Stderr: tb + "ModuleNotFoundError: No module named 'polars'"}, `packages ["polars"]`},
		{"printed, not raised", ExecResult{Status: "ok", Stdout: "ModuleNotFoundError: No module named 'x'\n"}, ""},
		{"on stdout of a failed job", ExecResult{Status: "error", Stdout: "ModuleNotFoundError: No module named 'x'\n", Stderr: tb + "ValueError: no\n"}, ""},
		{"another error", ExecResult{Status: "error", Stderr: tb + "ImportError: cannot import name 'x' from 'y'\n"}, ""},
		{"a timeout", ExecResult{Status: "timeout", Stderr: "ModuleNotFoundError: No module named 'x'\n"}, ""},
	} {
		text := execText(tc.er, len(tc.er.Stdout), len(tc.er.Stderr))
		hinted := strings.Contains(text, "[hint:")
		if tc.want == "" && hinted || tc.want != "" && !strings.Contains(text, tc.want) {
			t.Errorf("%s: text %q, want hint %q", tc.name, text, tc.want)
		}
		if last := text[strings.LastIndexByte(text, '\n')+1:]; !strings.HasPrefix(last, "["+tc.er.Status) {
			t.Errorf("%s: the status line is not last: %q", tc.name, text)
		}
	}
}
