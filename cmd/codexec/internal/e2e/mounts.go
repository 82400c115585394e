package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// UnmountUnder detaches every mount at or below dir, deepest first. A
// worker stopped with SIGKILL leaves its sessions' file systems mounted
// under its data directory (the next worker started on it unmounts them);
// a test or benchmark that removes that directory calls this first. Errors
// are ignored: what cannot be unmounted shows as the removal's error.
func UnmountUnder(dir string) {
	if dir == "" {
		return
	}
	dir = filepath.Clean(dir)
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer f.Close()
	var points []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		p := unescapeMountPath(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
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

// DataDirOf is the data directory a codexec process was started with: its
// --data-dir argument, else CODEXEC_DATA_DIR in env; "" when neither.
func DataDirOf(args, env []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--data-dir="); ok {
			return v
		}
		if a == "--data-dir" && i+1 < len(args) {
			return args[i+1]
		}
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CODEXEC_DATA_DIR="); ok {
			return v
		}
	}
	return ""
}
