package wire

import (
	"strings"
	"unicode/utf8"
)

// MaxFilenameLen is the longest file name CleanFilename returns, suffix included.
const MaxFilenameLen = 100

// CleanFilename turns a client-supplied file name into one that is safe to
// create inside a session's directory: a single path element of ASCII
// letters, digits, '.', '_' and '-', never starting with '.', at most
// MaxFilenameLen bytes, ending in ".py". Directory parts, separators (both
// '/' and '\'), NUL and other control bytes, and non-ASCII characters are
// replaced, so "../../etc/passwd" becomes "etc_passwd.py". An empty result
// becomes "script.py". It never fails: the caller reports the cleaned name
// back to the client, who sees exactly what was saved.
func CleanFilename(name string) string {
	var b strings.Builder
	lastUnderscore := false
	for len(name) > 0 {
		r, size := utf8.DecodeRuneInString(name)
		name = name[size:]
		ok := r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
		if ok && r == '.' && strings.HasSuffix(b.String(), ".") {
			ok = false // no ".." anywhere
		}
		if !ok {
			if !lastUnderscore && b.Len() > 0 {
				b.WriteByte('_')
				lastUnderscore = true
			}
			continue
		}
		if b.Len() == 0 && (r == '.' || r == '_' || r == '-') {
			continue // no hidden files, no option-looking names
		}
		b.WriteRune(r)
		lastUnderscore = r == '_'
	}
	s := strings.Trim(b.String(), "._-")
	s = strings.TrimSuffix(s, ".py")
	s = strings.TrimRight(s, "._-")
	if s == "" {
		s = "script"
	}
	if len(s) > MaxFilenameLen-3 {
		s = strings.TrimRight(s[:MaxFilenameLen-3], "._-")
	}
	return s + ".py"
}
