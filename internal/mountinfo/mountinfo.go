// Package mountinfo reads the fields of /proc/<pid>/mountinfo.
package mountinfo

import (
	"bufio"
	"io"
	"strconv"
	"strings"
)

// Unescape undoes mountinfo's octal escapes of space, tab, newline and
// backslash ("\040" for a space) in a root or mount point field.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Under lists the mount points strictly below dir in the mountinfo table
// r, in the order the kernel lists them (parents first).
func Under(r io.Reader, dir string) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		if mp := Unescape(fields[4]); strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}
