package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config says how sandboxes are built on this worker.
type Config struct {
	// Launcher builds the sandboxes: LauncherBuiltin (this program; the
	// default, LauncherAuto, is the same) or LauncherBwrap (bubblewrap).
	Launcher string
	// Bwrap is the bubblewrap binary of LauncherBwrap: a path or a name
	// on PATH. Default "bwrap".
	Bwrap string
	// Network lets jobs use the worker's network (egress). Without it a
	// job has a private loopback only.
	Network bool
	// ReadOnly are extra host paths bound read-only into every sandbox
	// (datasets, a conda installation outside /usr or /opt).
	ReadOnly []string
	// Devices are device nodes bound into every sandbox (/dev/nvidia0).
	Devices []string
}

// Sandbox builds the command lines of sandboxes. Its zero value is not
// usable: get one from Probe.
type Sandbox struct {
	launcher []string // what a command line starts with: bwrap, or this program and its marker
	cfg      Config
	version  string
	system   []string // the arguments every sandbox starts with
	rootless bool     // not root: every sandbox has a user namespace of its own
	devices  []Device // bound into these sandboxes only (WithDevices)
}

// ErrUnavailable is wrapped by Probe's error when the launcher is missing
// or cannot create namespaces on this machine.
var ErrUnavailable = errors.New("sandbox: no usable launcher")

// Probe finds the launcher and proves that it can build a sandbox on this
// machine (a container may forbid the namespaces it needs) by running
// /bin/true in one. The error wraps ErrUnavailable and says why.
// LauncherAuto is the built-in launcher, or bubblewrap where only
// bubblewrap works (a setuid bwrap where unprivileged users may not make
// user namespaces); with neither it fails, naming both reasons.
func Probe(ctx context.Context, cfg Config) (*Sandbox, error) {
	if cfg.Launcher != "" && cfg.Launcher != LauncherAuto {
		return probe(ctx, cfg)
	}
	cfg.Launcher = LauncherBuiltin
	s, err := probe(ctx, cfg)
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return s, err
	}
	cfg.Launcher = LauncherBwrap
	s, bwErr := probe(ctx, cfg)
	if bwErr != nil {
		return nil, fmt.Errorf("%w; bubblewrap: %v", err, bwErr)
	}
	return s, nil
}

// probe is Probe of one launcher.
func probe(ctx context.Context, cfg Config) (*Sandbox, error) {
	var launcher []string
	var version string
	switch cfg.Launcher {
	case LauncherBuiltin:
		if runtime.GOOS != "linux" {
			return nil, fmt.Errorf("%w: the built-in launcher needs Linux", ErrUnavailable)
		}
		launcher, version = []string{selfExe, launchMarker}, LauncherBuiltin
	case LauncherBwrap:
		path, err := findBwrap(cfg.Bwrap)
		if err != nil {
			return nil, err
		}
		launcher = []string{path}
	default:
		return nil, fmt.Errorf("sandbox: unknown launcher %q: %s, %s or %s", cfg.Launcher, LauncherAuto, LauncherBuiltin, LauncherBwrap)
	}
	for _, p := range append(slices.Clone(cfg.ReadOnly), cfg.Devices...) {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: %q is not an absolute path", p)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	s := &Sandbox{launcher: launcher, cfg: cfg, rootless: os.Geteuid() != 0, version: version}
	s.system = systemArgs()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if version == "" {
		out, err := exec.CommandContext(ctx, launcher[0], "--version").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("%w: %s --version: %v", ErrUnavailable, launcher[0], err)
		}
		s.version = strings.TrimSpace(string(out))
	}
	probe := s.Args(Options{}, "/bin/true")
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, probe[0], probe[1:]...)
	cmd.Stderr = &stderr
	cmd.Env = []string{}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: a test sandbox (%s) failed: %v: %s", ErrUnavailable, s.version, err, strings.TrimSpace(stderr.String()))
	}
	return s, nil
}

// findBwrap is the absolute path of bubblewrap, name (default "bwrap")
// being a path or a name on PATH.
func findBwrap(name string) (string, error) {
	if name == "" {
		name = "bwrap"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found", ErrUnavailable, name)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return path, nil
}

// Version is what `bwrap --version` says, or "builtin".
func (s *Sandbox) Version() string { return s.version }

// Network reports whether jobs may use the worker's network.
func (s *Sandbox) Network() bool { return s.cfg.Network }

// Rootless reports that the worker is not root: its sandboxes live in user
// namespaces of their own (which the kernel must allow unprivileged
// users), where the capabilities a sandbox keeps are the namespace's only,
// and every job runs as the worker's own uid.
func (s *Sandbox) Rootless() bool { return s.rootless }

// Mount is one host path made visible in a sandbox, at the same path.
type Mount struct {
	Path string
	// Write makes it writable; otherwise it is read-only.
	Write bool
}

// Options describe one sandbox beyond what every sandbox has.
type Options struct {
	// Mounts are the paths the sandbox sees besides the system's.
	Mounts []Mount
	// Network gives the sandbox the worker's network instead of a private
	// loopback.
	Network bool
	// Caps are the capabilities the sandboxed process keeps ("CAP_SETUID");
	// every other one is dropped, from the bounding set too.
	Caps []string
	// AsPID1 makes the command the sandbox's PID 1 (no bubblewrap reaper):
	// orphans of the namespace become its children.
	AsPID1 bool
	// InfoFD, when above 2, is a descriptor of the command's process on
	// which bubblewrap writes {"child-pid": N} (the pid on the host).
	InfoFD int
	// HostCgroupNS keeps the host's cgroup namespace. A process in a
	// cgroup namespace may move only between cgroups under its namespace's
	// root where cgroup2 is mounted with nsdelegate (the kernel answers
	// ENOENT otherwise), and the job cgroups of a worker on cgroup v2 lie
	// beside the worker's own, not under it: every job failed to join its
	// cgroups on such a machine (a GPU host, 2026-12-04).
	HostCgroupNS bool
}

// Args returns the argv that runs argv in a sandbox: argv[0] must be an
// absolute path visible in it.
//
// Every sandbox has: new PID, IPC, UTS and (unless Options.HostCgroupNS)
// cgroup namespaces and, unless
// Options.Network, a network namespace with loopback only; a tmpfs root
// with the system's directories (/usr, /etc, /opt and the /bin-like links)
// read-only, /etc/shadow and /etc/gshadow replaced by empty files, a fresh
// /dev and /proc, a private /tmp; the extra Config.ReadOnly paths and
// devices; the Options.Mounts; all capabilities dropped but Options.Caps;
// and it dies with the process that started bubblewrap.
func (s *Sandbox) Args(o Options, argv ...string) []string {
	args := append(slices.Clone(s.launcher), "--unshare-pid", "--unshare-ipc", "--unshare-uts")
	if !o.HostCgroupNS {
		args = append(args, "--unshare-cgroup-try")
	}
	args = append(args, "--die-with-parent", "--hostname", "codexec")
	if s.rootless {
		args = append(args, "--unshare-user")
	}
	if !o.Network {
		args = append(args, "--unshare-net")
	}
	if o.AsPID1 {
		args = append(args, "--as-pid-1")
	}
	if o.InfoFD > 2 {
		args = append(args, "--info-fd", strconv.Itoa(o.InfoFD))
	}
	args = append(args, s.system...)
	mounts := dedupe(o.Mounts)
	// bubblewrap makes the directories above a mount with the modes they
	// have on the host, and /root is 0700: jobs, under uids of their own,
	// could not reach an interpreter installed under it. Make them first,
	// passable by all; they hold nothing but the way down.
	paths := slices.Concat(s.cfg.ReadOnly, s.cfg.Devices)
	for _, m := range mounts {
		paths = append(paths, m.Path)
	}
	for _, dir := range ancestors(paths) {
		args = append(args, "--perms", "0755", "--dir", dir)
	}
	for _, p := range s.cfg.ReadOnly {
		args = append(args, "--ro-bind", p, p)
	}
	for _, p := range s.cfg.Devices {
		args = append(args, "--dev-bind", p, p)
	}
	args = append(args, s.deviceArgs()...)
	for _, m := range mounts {
		if m.Write {
			args = append(args, "--bind", m.Path, m.Path)
		} else {
			args = append(args, "--ro-bind", m.Path, m.Path)
		}
	}
	args = append(args, "--cap-drop", "ALL")
	for _, c := range o.Caps {
		args = append(args, "--cap-add", c)
	}
	args = append(args, "--chdir", "/", "--")
	return append(args, argv...)
}

// systemArgs are the mounts of the system's own directories: read-only,
// links kept as links (/bin -> usr/bin on merged-/usr systems).
func systemArgs() []string {
	var args []string
	for _, dir := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"} {
		fi, err := os.Lstat(dir)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(dir); err == nil {
				args = append(args, "--symlink", target, dir)
			}
		case fi.IsDir():
			args = append(args, "--ro-bind", dir, dir)
		}
	}
	// Hashes of the host's passwords are nobody's business; uid checks
	// already keep them from jobs, this keeps them from root inside too.
	for _, f := range []string{"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-"} {
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() {
			args = append(args, "--ro-bind", "/dev/null", f)
		}
	}
	args = append(args, "--dev", "/dev", "--proc", "/proc")
	for _, f := range MaskedProc {
		args = append(args, "--ro-bind", "/dev/null", f)
	}
	for _, d := range MaskedProcDirs {
		args = append(args, "--tmpfs", d)
	}
	return append(args, "--tmpfs", "/tmp")
}

// MaskedProc are the files of a sandbox's /proc that tell of the whole
// host's block devices, covered with /dev/null (empty to read): every
// session's file system is a loop device of its own, and /proc/diskstats
// gave each one's reads and writes as they happened, so that one session
// watched another's disk activity (when it ran, how much it wrote);
// /proc/partitions listed the devices. zygote.py covers the same in the
// /proc each job mounts.
var MaskedProc = []string{"/proc/diskstats", "/proc/partitions"}

// MaskedProcDirs are the directories of a sandbox's /proc covered with an
// empty tmpfs (root's, which a job cannot write): /proc/fs has a directory
// per mounted ext4 file system, each session's loop device included, whose
// mb_groups gave that file system's free blocks, group by group (what
// another session's files take, as it changed), and jbd2's its journal's
// transactions. zygote.py covers the same in the /proc each job mounts.
var MaskedProcDirs = []string{"/proc/fs"}

// dedupe drops mounts that another mount of the list already covers with
// the same or more access, and keeps a stable order (parents first), so
// that a writable mount is not hidden under a read-only parent bound later.
func dedupe(ms []Mount) []Mount {
	out := slices.Clone(ms)
	for i := range out {
		out[i].Path = filepath.Clean(out[i].Path)
	}
	slices.SortStableFunc(out, func(a, b Mount) int { return strings.Compare(a.Path, b.Path) })
	keep := out[:0]
	for _, m := range out {
		covered := false
		for _, k := range keep {
			if (k.Path == m.Path || within(m.Path, k.Path)) && (k.Write || !m.Write) {
				covered = true
				break
			}
		}
		if !covered {
			keep = append(keep, m)
		}
	}
	return keep
}

// ancestors returns the directories above paths, parents first, but for
// "/" and those the system mounts already show.
func ancestors(paths []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		for dir := filepath.Dir(filepath.Clean(p)); dir != "/" && dir != "."; dir = filepath.Dir(dir) {
			if !seen[dir] && !SystemPath(dir) {
				seen[dir] = true
				out = append(out, dir)
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return out
}

// within reports whether path lies strictly under dir.
func within(path, dir string) bool {
	return dir == "/" || strings.HasPrefix(path, dir+"/")
}

// SystemPath reports whether the system mounts of every sandbox already
// show path (read-only), so that binding it again is not needed.
func SystemPath(path string) bool {
	path = filepath.Clean(path)
	for _, dir := range []string{"/usr", "/etc", "/opt"} {
		if path == dir || within(path, dir) {
			return true
		}
	}
	return false
}

// InterpreterMounts returns what a sandbox must show, read-only, for the
// interpreter python to run: the environment it belongs to (a venv or
// conda prefix: the directory above its bin/) and the installation the
// interpreter's executable really lives in, links resolved.
func InterpreterMounts(python string) ([]Mount, error) {
	if !filepath.IsAbs(python) {
		return nil, fmt.Errorf("sandbox: interpreter %q is not an absolute path", python)
	}
	var ms []Mount
	add := func(dir string) {
		if dir != "/" && !SystemPath(dir) {
			ms = append(ms, Mount{Path: dir})
		}
	}
	add(filepath.Dir(filepath.Dir(python)))
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		return nil, fmt.Errorf("sandbox: interpreter: %w", err)
	}
	add(filepath.Dir(filepath.Dir(real)))
	// A venv's pyvenv.cfg names its base installation's bin directory.
	if cfg, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(python)), "pyvenv.cfg")); err == nil {
		for line := range strings.SplitSeq(string(cfg), "\n") {
			k, v, ok := strings.Cut(line, "=")
			if ok && strings.TrimSpace(k) == "home" {
				if home := strings.TrimSpace(v); filepath.IsAbs(home) {
					if real, err := filepath.EvalSymlinks(home); err == nil {
						add(filepath.Dir(real))
					}
				}
			}
		}
	}
	return ms, nil
}

// Installer returns what envcache.Config.Confine takes: a function that
// wraps a build command (an installer) in a sandbox with the network (the
// package index), readOnly paths visible and writable ones writable, and
// nothing else of the worker's.
func (s *Sandbox) Installer() func(argv, readOnly, writable []string) ([]string, error) {
	return func(argv, readOnly, writable []string) ([]string, error) {
		var ms []Mount
		for _, p := range readOnly {
			if !SystemPath(p) {
				ms = append(ms, Mount{Path: p})
			}
		}
		for _, p := range writable {
			ms = append(ms, Mount{Path: p, Write: true})
		}
		return s.Args(Options{Mounts: ms, Network: true}, argv...), nil
	}
}
