package e2e

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/worker/diskfs"
)

// UnmountUnder detaches every mount below dir, deepest first. A worker
// stopped with SIGKILL leaves its sessions' file systems mounted under its
// data directory (the next worker started on it unmounts them); a test or
// benchmark that removes that directory calls this first. Errors are
// ignored: what cannot be unmounted shows as the removal's error.
func UnmountUnder(dir string) {
	if dir == "" {
		return
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return
	}
	points, _ := diskfs.MountsUnder(abs)
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
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
