package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`a\040b`: "a b", `a\134b`: `a\b`, `end\04`: `end\04`, `\011`: "\t", `plain`: "plain"} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
