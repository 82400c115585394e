package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/codexec/codexec/internal/mountinfo"
)

// The built-in launcher: this program, started again with launchMarker
// first, builds the sandbox that Args describes, the way bubblewrap would,
// in two processes:
//
//   - the outside parent (launchOuter), what the caller started, stays in
//     the caller's namespaces: it starts the inner process in new ones,
//     writes its pid on the info descriptor, dies with its own parent and
//     exits as the inner process does. It passes no signal on, as
//     bubblewrap does not: the kernel drops a signal to a PID 1 without
//     a handler for it, so a forwarded SIGTERM could leave the sandbox
//     running; a signal that ends this process ends the sandbox (the
//     inner process dies with it);
//   - the inner process (launchInner), PID 1 of the new PID namespace,
//     builds the new root (a tmpfs, the binds, /dev, /proc, /tmp),
//     pivots into it, drops capabilities and becomes the command (or,
//     without --as-pid-1, starts it and reaps orphans until it exits).
//
// Two processes, because a Go program is multi-threaded from its start:
// it cannot unshare a user namespace (the kernel refuses a threaded
// caller), so the namespaces are made by clone, for a new process.
// Both run from this package's init, before any other code of the
// program: every program that links the package (codexec, its test
// binaries) can launch sandboxes with nothing installed.
func init() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case launchMarker:
		os.Exit(launchOuter(os.Args[2:]))
	case innerMarker:
		os.Exit(launchInner(os.Args[2:]))
	case reaperMarker:
		os.Exit(launchReaper(os.Args[2:]))
	}
}

// launchFail reports why the launcher could not start the command, as
// bubblewrap does: on stderr, exit status 1.
func launchFail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, LauncherName+": "+format+"\n", args...)
	return 1
}

// launchOuter is the outside parent.
func launchOuter(args []string) int {
	setName(LauncherName)
	s, err := parseSpec(args)
	if err != nil {
		return launchFail("%v", err)
	}
	if s.dieWithParent {
		// The caller's Pdeathsig may not be set (an installer), and this
		// process is the one between it and the sandbox.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			return launchFail("die with parent: %v", err)
		}
	}
	var info *os.File
	if s.infoFD >= 0 {
		// Ours, not the sandbox's.
		syscall.CloseOnExec(s.infoFD)
		info = os.NewFile(uintptr(s.infoFD), "info")
	}
	attr := &syscall.SysProcAttr{Cloneflags: s.cloneflags(), Pdeathsig: syscall.SIGKILL}
	if s.unshareUser {
		// The caller's own ids, and nothing else, as bubblewrap maps
		// them; setgroups stays denied. The inner process keeps every
		// capability of the new namespace across its exec, as ambient
		// ones, to build the sandbox, and drops them before the command.
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
		for c := 0; c <= lastCap(); c++ {
			attr.AmbientCaps = append(attr.AmbientCaps, uintptr(c))
		}
	}
	argv := append([]string{selfExe, innerMarker}, args...)
	// Descriptors 3 and up that are not close-on-exec pass as they are.
	pid, err := syscall.ForkExec(selfExe, argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}, Sys: attr})
	if err != nil {
		return launchFail("creating new namespaces failed: %v", err)
	}
	if info != nil {
		_, _ = fmt.Fprintf(info, "{\n    \"child-pid\": %d\n}\n", pid)
		info.Close()
	}
	return waitStatus(pid)
}

// waitStatus waits for the child pid and returns the exit status that
// says how it ended: its own, or 128 plus the signal that killed it.
func waitStatus(pid int) int {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return launchFail("wait: %v", err)
		}
		break
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// cloneflags are the namespaces the spec asks for.
func (s *spec) cloneflags() uintptr {
	flags := uintptr(syscall.CLONE_NEWNS)
	for _, f := range []struct {
		on   bool
		flag uintptr
	}{
		{s.unsharePID, syscall.CLONE_NEWPID}, {s.unshareIPC, syscall.CLONE_NEWIPC}, {s.unshareUTS, syscall.CLONE_NEWUTS},
		{s.unshareNet, syscall.CLONE_NEWNET}, {s.unshareUser, syscall.CLONE_NEWUSER},
	} {
		if f.on {
			flags |= f.flag
		}
	}
	if _, err := os.Stat("/proc/self/ns/cgroup"); err == nil && s.unshareCgroup {
		flags |= unix.CLONE_NEWCGROUP
	}
	return flags
}

// lastCap is the highest capability the kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return len(capNames) - 1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return len(capNames) - 1
	}
	return n
}

// setName sets this thread's name, what ps shows as the command.
func setName(name string) {
	b := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&b[0])), 0, 0, 0)
}

// launchInner is the process in the new namespaces.
func launchInner(args []string) int {
	// Capabilities, no_new_privs and the parent-death signal belong to a
	// thread: everything below stays on this one, which execs the command.
	// (init runs on the main thread already.)
	runtime.LockOSThread()
	setName(LauncherName)
	s, err := parseSpec(args)
	if err != nil {
		return launchFail("%v", err)
	}
	if s.unshareNet {
		if err := loopbackUp(); err != nil {
			return launchFail("loopback: %v", err)
		}
	}
	if s.hostname != "" {
		if err := unix.Sethostname([]byte(s.hostname)); err != nil {
			return launchFail("hostname: %v", err)
		}
	}
	if err := buildRoot(s); err != nil {
		return launchFail("%v", err)
	}
	if err := os.Chdir(s.chdir); err != nil {
		return launchFail("chdir %s: %v", s.chdir, err)
	}
	path, err := exec.LookPath(s.argv[0])
	if err != nil {
		return launchFail("execvp %s: %v", s.argv[0], err)
	}
	if err := dropCaps(s.caps); err != nil {
		return launchFail("%v", err)
	}
	if s.asPID1 {
		err := syscall.Exec(path, s.argv, os.Environ())
		return launchFail("execvp %s: %v", s.argv[0], err)
	}
	// A reaper as PID 1, the command its child. Not this process: its
	// other threads still hold every capability of the namespace, and the
	// runtime cannot always reach them (with cgo). This thread execs a new
	// image of this program, whose threads all start from it, with what
	// the command will have (an exec as root gives back the inheritable
	// and bounding sets: the kept capabilities, no more).
	err = syscall.Exec(selfExe, append([]string{selfExe, reaperMarker, path}, s.argv...), os.Environ())
	return launchFail("exec the reaper: %v", err)
}

// launchReaper is PID 1 of a sandbox without --as-pid-1: it starts the
// command (args: its path, then its argv) and reaps every orphan of the
// namespace until the command exits, and exits as it did.
func launchReaper(args []string) int {
	setName(LauncherName)
	if len(args) < 2 {
		return launchFail("reaper: no command")
	}
	pid, err := syscall.ForkExec(args[0], args[1:], &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, 2}})
	if err != nil {
		return launchFail("execvp %s: %v", args[1], err)
	}
	// What the caller passed was for the command, as bubblewrap's PID 1
	// closes it.
	closeInherited()
	return reap(pid)
}

// closeInherited closes the descriptors above 2 that are not
// close-on-exec: those the caller passed for the command.
func closeInherited() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// reap waits for every child until pid has exited, and returns how it did.
func reap(pid int) int {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 1
		}
		if got == pid {
			if ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ws.ExitStatus()
		}
	}
}

// loopbackUp brings the new network namespace's loopback up; the kernel
// gives it 127.0.0.1 and ::1.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// dropCaps leaves this thread the capabilities keep, and no others, in
// every set (bounding, permitted, effective, inheritable, ambient: kept
// across the exec of the command whatever its uid), and sets
// no_new_privs, as bubblewrap does: no setuid binary or file capability
// gives anything back.
func dropCaps(keep []string) error {
	var mask [2]uint32
	for _, name := range keep {
		n, _ := capNumber(name)
		mask[n/32] |= 1 << (n % 32)
	}
	kept := func(c int) bool { return c < 64 && mask[c/32]&(1<<(c%32)) != 0 }
	last := lastCap()
	for c := 0; c <= last; c++ {
		if !kept(c) {
			if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
				return fmt.Errorf("dropping capability %d from the bounding set: %v", c, err)
			}
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %v", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: mask[0], Permitted: mask[0], Inheritable: mask[0]},
		{Effective: mask[1], Permitted: mask[1], Inheritable: mask[1]},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %v", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("ambient capabilities: %v", err)
	}
	for c := 0; c <= last; c++ {
		if kept(c) {
			if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
				return fmt.Errorf("ambient capability %d: %v", c, err)
			}
		}
	}
	return nil
}

// buildRoot makes the sandbox's file system and makes it the root, the
// way bubblewrap does: every mount of the caller's namespace becomes a
// slave (mounts made on the host later still arrive, none made here
// leave); a tmpfs over /tmp becomes the root for a while, with the old
// root under /oldroot and the new one, another tmpfs, at /newroot; the
// steps are done from /oldroot into /newroot; the old root is detached
// and /newroot becomes /.
func buildRoot(s *spec) error {
	old := unix.Umask(0)
	defer unix.Umask(old)
	// Binds name host paths: resolve their links on the host, where they
	// mean what the caller meant.
	for i := range s.ops {
		if op := &s.ops[i]; op.kind == "ro-bind" || op.kind == "bind" || op.kind == "dev-bind" {
			real, err := filepath.EvalSymlinks(op.src)
			if err != nil {
				return fmt.Errorf("can't find source path %s: %v", op.src, err)
			}
			op.src = real
		}
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"make / slave", func() error { return unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, "") }},
		{"mount tmpfs on /tmp", func() error { return unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755") }},
		{"chdir /tmp", func() error { return unix.Chdir("/tmp") }},
		{"mkdir newroot", func() error { return unix.Mkdir("newroot", 0o755) }},
		{"mount newroot", func() error {
			return unix.Mount("tmpfs", "newroot", "tmpfs", unix.MS_NODEV|unix.MS_NOSUID, "mode=0755")
		}},
		{"mkdir oldroot", func() error { return unix.Mkdir("oldroot", 0o755) }},
		{"pivot_root", func() error { return unix.PivotRoot("/tmp", "oldroot") }},
		{"chdir /", func() error { return unix.Chdir("/") }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			return fmt.Errorf("%s: %v", st.what, err)
		}
	}
	for _, op := range s.ops {
		if err := op.apply(); err != nil {
			return err
		}
	}
	steps = steps[:0]
	for _, st := range []struct {
		what string
		do   func() error
	}{
		// Private first: detaching it must not reach the caller's mounts.
		{"make oldroot private", func() error { return unix.Mount("oldroot", "oldroot", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		{"unmount oldroot", func() error { return unix.Unmount("oldroot", unix.MNT_DETACH) }},
		{"chdir newroot", func() error { return unix.Chdir("/newroot") }},
		{"pivot_root into newroot", func() error { return unix.PivotRoot(".", ".") }},
		{"unmount the setup root", func() error { return unix.Unmount(".", unix.MNT_DETACH) }},
		{"chdir /", func() error { return unix.Chdir("/") }},
	} {
		if err := st.do(); err != nil {
			return fmt.Errorf("%s: %v", st.what, err)
		}
	}
	return nil
}

// devNodes are the devices of a fresh /dev, bound from the host's.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// apply does one step, from the setup root: the host's / at /oldroot,
// the sandbox's at /newroot.
func (op mountOp) apply() error {
	dst := "/newroot" + op.dst
	var err error
	switch op.kind {
	case "ro-bind", "bind", "dev-bind":
		err = bindMount("/oldroot"+op.src, dst, op.kind == "ro-bind", op.kind == "dev-bind")
	case "symlink":
		if err = mkdirAll(filepath.Dir(dst), 0o755); err == nil {
			err = os.Symlink(op.src, dst)
		}
	case "dir":
		err = mkdirAll(dst, op.perms)
	case "tmpfs":
		if err = mkdirAll(dst, 0o755); err == nil {
			err = unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=%#o", op.perms))
		}
	case "proc":
		err = mountProc(dst)
	case "dev":
		err = mountDev(dst)
	}
	if err != nil {
		return fmt.Errorf("--%s %s: %v", op.kind, op.dst, err)
	}
	return nil
}

// mkdirAll makes dir and its missing parents with mode perm (the umask is
// 0 during the setup). A directory already there stays as it is.
func mkdirAll(dir string, perm os.FileMode) error {
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
		return nil
	}
	if err := mkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := unix.Mkdir(dir, uint32(perm)); err != nil && err != unix.EEXIST {
		return err
	}
	return nil
}

// bindMount binds src at dst, with its mounts below, then makes every one
// of them nosuid, nodev unless devices, and read-only if readOnly; the
// other flags stay as they are (in a user namespace they must).
func bindMount(src, dst string, readOnly, devices bool) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		err = mkdirAll(dst, 0o755)
	} else {
		err = createFile(dst)
	}
	if err != nil {
		return err
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	extra := uintptr(unix.MS_NOSUID)
	if !devices {
		extra |= unix.MS_NODEV
	}
	if readOnly {
		extra |= unix.MS_RDONLY
	}
	if err := remount(dst, extra); err != nil {
		return fmt.Errorf("remount %s: %v", dst, err)
	}
	subs, err := submounts(dst)
	if err != nil {
		return err
	}
	for _, m := range subs {
		// One that cannot be reached (a directory of another uid's
		// without search permission) is left as it is, as bubblewrap
		// leaves it.
		if err := remount(m, extra); err != nil && err != unix.EACCES && err != unix.ENOENT {
			return fmt.Errorf("remount %s: %v", m, err)
		}
	}
	return nil
}

// createFile makes an empty file at path (a mount point for a file), and
// its parents, unless something is there.
func createFile(path string) error {
	if _, err := os.Lstat(path); err == nil {
		return nil
	}
	if err := mkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	fd, err := unix.Open(path, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o444)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// remount adds the flags extra to the mount at path, keeping its own.
func remount(path string, extra uintptr) error {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return err
	}
	flags := uintptr(0)
	for _, f := range [][2]uintptr{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_SYNCHRONOUS, unix.MS_SYNCHRONOUS}, {unix.ST_MANDLOCK, unix.MS_MANDLOCK},
		{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f[0] != 0 {
			flags |= f[1]
		}
	}
	return unix.Mount("", path, "", unix.MS_REMOUNT|unix.MS_BIND|flags|extra, "")
}

// submounts lists the mount points strictly below dir, in the order the
// kernel lists them (parents first).
func submounts(dir string) ([]string, error) {
	// The host's proc, under the setup root, shows this mount namespace.
	f, err := os.Open("/oldroot/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return mountinfo.Under(f, dir)
}

// mountProc mounts a proc of the new PID namespace at dst, and covers the
// parts of it that reach the whole machine when writable (/proc/sys,
// sysrq-trigger, irq, bus) with read-only binds of themselves.
func mountProc(dst string) error {
	if err := mkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("proc", dst, "proc", unix.MS_NOSUID|unix.MS_NOEXEC|unix.MS_NODEV, ""); err != nil {
		return err
	}
	for _, sub := range []string{"sys", "sysrq-trigger", "irq", "bus"} {
		p := dst + "/" + sub
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := bindMount(p, p, true, false); err != nil {
			return err
		}
	}
	return nil
}

// mountDev makes a minimal /dev at dst: a tmpfs with the host's null,
// zero, full, random, urandom and tty bound in, a devpts instance of its
// own with ptmx linked to it, an empty shm, and the usual links into /proc.
func mountDev(dst string) error {
	if err := mkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", dst, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return err
	}
	for _, n := range devNodes {
		if err := bindMount("/oldroot/dev/"+n, dst+"/"+n, false, true); err != nil {
			return err
		}
	}
	links := [][2]string{
		{"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
		{"/proc/self/fd", "fd"}, {"/proc/kcore", "core"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], dst+"/"+l[1]); err != nil {
			return err
		}
	}
	for _, d := range []string{"shm", "pts"} {
		if err := unix.Mkdir(dst+"/"+d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", dst+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return err
	}
	return os.Symlink("pts/ptmx", dst+"/ptmx")
}
