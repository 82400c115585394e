package sandbox

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Launchers (Config.Launcher): what builds the namespaces and mounts of a
// sandbox. LauncherBuiltin is this program itself, started again (see
// launch_linux.go); LauncherBwrap is bubblewrap. LauncherAuto is
// LauncherBuiltin (one code path on every machine, nothing to install),
// or bubblewrap where only bubblewrap works (see Probe).
const (
	LauncherAuto    = "auto"
	LauncherBuiltin = "builtin"
	LauncherBwrap   = "bwrap"
)

// The first arguments of a program started as the built-in launcher:
// launchMarker for the outside parent, innerMarker for the process in the
// new namespaces that sets them up and becomes the command, reaperMarker
// for the PID 1 that starts the command otherwise. No other command line
// of codexec starts with them.
const (
	launchMarker = "__codexec_sandbox_launch__"
	innerMarker  = "__codexec_sandbox_inner__"
	reaperMarker = "__codexec_sandbox_reaper__"
)

// selfExe is how the built-in launcher names the running program: the
// kernel's link to the binary this process runs, resolved by the process
// that executes it (the worker, forked). It names the same binary after
// the file was replaced or deleted (an upgrade under a running worker, or
// `go run` cleaning up its build), where a path would not.
const selfExe = "/proc/self/exe"

// LauncherName is the process name (comm) of the built-in launcher's
// processes outside the command: what ps shows for them.
const LauncherName = "codexec-sandbox"

// spec is what a launcher's command line says: the subset of
// bubblewrap's options that Sandbox.Args writes, parsed. The built-in
// launcher reads the same command line that bubblewrap would, so that
// both build the same sandbox from one Args.
type spec struct {
	unsharePID, unshareIPC, unshareUTS, unshareCgroup, unshareNet, unshareUser bool
	dieWithParent, asPID1                                                      bool
	hostname                                                                   string
	infoFD                                                                     int
	ops                                                                        []mountOp
	caps                                                                       []string // kept; every other one is dropped
	chdir                                                                      string
	argv                                                                       []string
}

// mountOp is one step of building the sandbox's file system, in the order
// of the command line.
type mountOp struct {
	kind     string // "ro-bind", "bind", "dev-bind", "symlink", "dir", "dev", "proc", "tmpfs"
	src, dst string // src: the host path of a bind, the target of a link
	perms    os.FileMode
}

// parseSpec reads a launcher command line (after the marker).
func parseSpec(args []string) (*spec, error) {
	s := &spec{infoFD: -1, chdir: "/"}
	perms := os.FileMode(0o755)
	next := func(n int) ([]string, error) {
		if len(args) < n+1 {
			return nil, fmt.Errorf("%s needs %d argument(s)", args[0], n)
		}
		v := args[1 : n+1]
		args = args[n+1:]
		return v, nil
	}
	for len(args) > 0 {
		opt := args[0]
		if opt == "--" {
			s.argv = args[1:]
			break
		}
		flag := map[string]*bool{
			"--unshare-pid": &s.unsharePID, "--unshare-ipc": &s.unshareIPC, "--unshare-uts": &s.unshareUTS,
			"--unshare-cgroup-try": &s.unshareCgroup, "--unshare-net": &s.unshareNet, "--unshare-user": &s.unshareUser,
			"--die-with-parent": &s.dieWithParent, "--as-pid-1": &s.asPID1,
		}[opt]
		if flag != nil {
			*flag = true
			args = args[1:]
			continue
		}
		n := 1
		switch opt {
		case "--ro-bind", "--bind", "--dev-bind", "--symlink":
			n = 2
		case "--hostname", "--info-fd", "--perms", "--dir", "--dev", "--proc", "--tmpfs", "--cap-drop", "--cap-add", "--chdir":
		default:
			return nil, fmt.Errorf("unknown option %q", opt)
		}
		v, err := next(n)
		if err != nil {
			return nil, err
		}
		switch opt {
		case "--hostname":
			s.hostname = v[0]
		case "--info-fd":
			if s.infoFD, err = strconv.Atoi(v[0]); err != nil || s.infoFD < 3 {
				return nil, fmt.Errorf("--info-fd %q: want a descriptor above 2", v[0])
			}
		case "--perms":
			p, err := strconv.ParseUint(v[0], 8, 12)
			if err != nil {
				return nil, fmt.Errorf("--perms %q: %v", v[0], err)
			}
			perms = os.FileMode(p)
			continue // applies to the next --dir or --tmpfs only
		case "--cap-drop":
			if !strings.EqualFold(v[0], "ALL") {
				return nil, fmt.Errorf("--cap-drop %q: only ALL", v[0])
			}
			s.caps = nil
		case "--cap-add":
			if _, ok := capNumber(v[0]); !ok {
				return nil, fmt.Errorf("--cap-add %q: unknown capability", v[0])
			}
			s.caps = append(s.caps, v[0])
		case "--chdir":
			s.chdir = v[0]
		case "--ro-bind", "--bind", "--dev-bind", "--symlink":
			s.ops = append(s.ops, mountOp{kind: opt[2:], src: v[0], dst: v[1]})
		default: // --dir, --dev, --proc, --tmpfs
			s.ops = append(s.ops, mountOp{kind: opt[2:], dst: v[0], perms: perms})
		}
		perms = 0o755
	}
	if len(s.argv) == 0 {
		return nil, fmt.Errorf("no command")
	}
	for _, op := range s.ops {
		if !strings.HasPrefix(op.dst, "/") || (op.kind != "symlink" && op.kind != "dir" && op.kind != "dev" && op.kind != "proc" && op.kind != "tmpfs" && !strings.HasPrefix(op.src, "/")) {
			return nil, fmt.Errorf("--%s %s %s: paths must be absolute", op.kind, op.src, op.dst)
		}
	}
	return s, nil
}

// capNames are the capabilities by number (linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN",
	"CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// capNumber is the number of the capability name ("CAP_KILL" or "kill").
func capNumber(name string) (int, bool) {
	name = strings.ToUpper(name)
	if !strings.HasPrefix(name, "CAP_") {
		name = "CAP_" + name
	}
	for i, n := range capNames {
		if n == name {
			return i, true
		}
	}
	return 0, false
}
