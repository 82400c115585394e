package wire

import (
	"strings"
	"testing"
)

func TestCheckWorkspacePath(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "a.txt", "data/in.csv", ".codexec/output/x.stdout", "é/ü name.txt", "a..b", "...", strings.Repeat("n", 255)} {
		if err := CheckWorkspacePath(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "/etc/passwd", "..", "../a", "a/..", "a/../b", ".", "./a", "a/./b", "a//b", "a/", "a\x00b",
		"a\nb", "\xff", strings.Repeat("n", 256), strings.Repeat("a/", 600) + "a"} {
		if err := CheckWorkspacePath(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
