package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filter is a built program, run by x/net/bpf's interpreter on the
// seccomp_data of a call: the program's decisions, without a kernel.
type filter struct {
	t    *testing.T
	vm   *bpf.VM
	info *arch.Info
}

func newFilter(t *testing.T, allow ...string) *filter {
	t.Helper()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("no filter for %s", runtime.GOARCH)
	}
	prog, err := Program(allow)
	if err != nil {
		t.Fatal(err)
	}
	if len(prog)%8 != 0 || len(prog)/8 > 4096 {
		t.Fatalf("program of %d bytes: not a whole number of instructions, or more than the kernel takes", len(prog))
	}
	var ins []bpf.Instruction
	for i := 0; i < len(prog); i += 8 {
		ins = append(ins, bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(prog[i:]), Jt: prog[i+2], Jf: prog[i+3], K: binary.NativeEndian.Uint32(prog[i+4:]),
		}.Disassemble())
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	return &filter{t: t, vm: vm, info: info}
}

// decide returns what the program answers to call nr of architecture
// auditArch with args. The interpreter loads 32-bit words big-endian (it
// is made for packets), the kernel in the machine's order: each word is
// written big-endian where the kernel's little-endian layout puts it.
func (f *filter) decide(auditArch, nr uint32, args ...uint64) uint32 {
	f.t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[offNr:], nr)
	binary.BigEndian.PutUint32(data[offArch:], auditArch)
	for i, a := range args {
		binary.BigEndian.PutUint32(data[offArgs+8*i:], uint32(a))
		binary.BigEndian.PutUint32(data[offArgs+8*i+4:], uint32(a>>32))
	}
	ret, err := f.vm.Run(data)
	if err != nil {
		f.t.Fatal(err)
	}
	return uint32(ret)
}

func (f *filter) call(name string, args ...uint64) uint32 {
	f.t.Helper()
	nr, ok := f.info.SyscallNames[name]
	if !ok {
		f.t.Fatalf("no %s on %s", name, f.info.Name)
	}
	return f.decide(uint32(f.info.ID), uint32(nr), args...)
}

func retName(r uint32) string {
	switch r {
	case retAllow:
		return "allow"
	case retEPERM:
		return "EPERM"
	case retENOSYS:
		return "ENOSYS"
	}
	return fmt.Sprintf("%#x", r)
}

func (f *filter) want(what string, got, want uint32) {
	f.t.Helper()
	if got != want {
		f.t.Errorf("%s: %s, want %s", what, retName(got), retName(want))
	}
}

// Every call of the table is decided: those of Refused refused, the rest
// (the conditional ones with harmless arguments) let through.
func TestEveryCallOfTheTable(t *testing.T) {
	f := newFilter(t)
	refused := 0
	for nr, name := range f.info.SyscallNumbers {
		want := retAllow
		switch {
		case slices.Contains(Refused, name):
			want = retEPERM
			refused++
		case name == "clone3":
			want = retENOSYS
		case slices.Contains(Conditional, name):
			continue // below
		}
		f.want(name, f.decide(uint32(f.info.ID), uint32(nr), 0, 0, 0), want)
	}
	if refused < 40 {
		t.Errorf("only %d calls of Refused are on %s", refused, f.info.Name)
	}
}

func TestArgumentsAreCheckedAs32Bits(t *testing.T) {
	f := newFilter(t)
	const high = 1 << 32 // the kernel drops it from an int argument
	for _, c := range []struct {
		what   string
		args   []uint64
		result uint32
	}{
		{"AF_UNIX stream", []uint64{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC, 0}, retAllow},
		{"AF_UNIX raw (a datagram socket to the kernel)", []uint64{unix.AF_UNIX, unix.SOCK_RAW, 0}, retAllow},
		{"AF_INET stream", []uint64{unix.AF_INET, unix.SOCK_STREAM, 0}, retAllow},
		{"AF_INET6 datagram, nonblocking", []uint64{unix.AF_INET6, unix.SOCK_DGRAM | unix.SOCK_NONBLOCK, 0}, retAllow},
		{"AF_INET ICMP datagram (ping)", []uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP}, retAllow},
		{"AF_INET raw", []uint64{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}, retEPERM},
		{"AF_INET6 raw, cloexec", []uint64{unix.AF_INET6, unix.SOCK_RAW | unix.SOCK_CLOEXEC, 0}, retEPERM},
		{"AF_INET raw, high bits", []uint64{unix.AF_INET, unix.SOCK_RAW | high, 0}, retEPERM},
		{"AF_INET SOCK_PACKET", []uint64{unix.AF_INET, unix.SOCK_PACKET, 0}, retEPERM},
		{"AF_INET stream, TCP", []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP}, retAllow},
		{"AF_INET6 datagram, UDP", []uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_UDP}, retAllow},
		{"AF_INET6 ICMPv6 datagram (ping)", []uint64{unix.AF_INET6, unix.SOCK_DGRAM, unix.IPPROTO_ICMPV6}, retAllow},
		{"AF_INET stream, MPTCP", []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, retEPERM},
		{"AF_INET6 stream, MPTCP", []uint64{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, retEPERM},
		{"AF_INET datagram, UDP-Lite", []uint64{unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}, retEPERM},
		{"AF_INET seqpacket, SCTP", []uint64{unix.AF_INET, unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP}, retEPERM},
		{"AF_INET stream, TCP, high bits", []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP | high}, retAllow},
		{"AF_INET stream, MPTCP, high bits", []uint64{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP | high}, retEPERM},
		{"AF_NETLINK route", []uint64{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE}, retAllow},
		{"AF_NETLINK route, high bits", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE | high}, retAllow},
		{"AF_NETLINK netfilter", []uint64{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER}, retEPERM},
		{"AF_NETLINK netfilter, high bits", []uint64{unix.AF_NETLINK | high, unix.SOCK_RAW, unix.NETLINK_NETFILTER}, retEPERM},
		{"AF_NETLINK audit", []uint64{unix.AF_NETLINK, unix.SOCK_DGRAM, unix.NETLINK_AUDIT}, retEPERM},
		{"AF_PACKET", []uint64{unix.AF_PACKET, unix.SOCK_RAW, 0x0300}, retEPERM},
		{"AF_PACKET, high bits", []uint64{unix.AF_PACKET | high, unix.SOCK_RAW, 0x0300}, retEPERM},
		{"AF_VSOCK", []uint64{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, retEPERM},
		{"AF_ALG", []uint64{unix.AF_ALG, unix.SOCK_SEQPACKET, 0}, retEPERM},
		{"AF_UNIX, high bits", []uint64{unix.AF_UNIX | high, unix.SOCK_STREAM, 0}, retAllow},
	} {
		f.want("socket "+c.what, f.call("socket", c.args...), c.result)
	}
	// Every family but the four, and values no family has yet.
	for family := uint64(0); family < 256; family++ {
		want := retEPERM
		if family == unix.AF_UNIX || family == unix.AF_INET || family == unix.AF_INET6 || family == unix.AF_NETLINK {
			want = retAllow
		}
		f.want(fmt.Sprintf("socket family %d", family), f.call("socket", family, unix.SOCK_DGRAM, 0), want)
	}

	// clone: threads and forks pass, any namespace flag is refused.
	thread := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD |
		unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID)
	f.want("clone of a thread", f.call("clone", thread), retAllow)
	f.want("clone of a fork", f.call("clone", uint64(unix.SIGCHLD)|unix.CLONE_CHILD_SETTID|unix.CLONE_CHILD_CLEARTID), retAllow)
	for _, ns := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
		unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET} {
		f.want(fmt.Sprintf("clone with %#x", ns), f.call("clone", uint64(unix.SIGCHLD)|ns|high), retEPERM)
	}
	f.want("clone3", f.call("clone3", 0, 88), retENOSYS)

	f.want("personality query", f.call("personality", 0xffffffff), retAllow)
	f.want("personality PER_LINUX", f.call("personality", 0), retAllow)
	f.want("personality ADDR_NO_RANDOMIZE", f.call("personality", 0x0040000), retEPERM)
	f.want("personality ADDR_NO_RANDOMIZE, high bits", f.call("personality", 0x0040000|high), retEPERM)
}

func TestOtherTablesAreRefused(t *testing.T) {
	f := newFilter(t)
	foreign := arch.I386
	if f.info == arch.AARCH64 {
		foreign = arch.ARM
	}
	f.want("getpid through the "+foreign.Name+" table", f.decide(uint32(foreign.ID), uint32(foreign.SyscallNames["getpid"])), retEPERM)
	maxNr := slices.Max(mapKeys(f.info.SyscallNumbers))
	f.want("a call newer than the tables", f.decide(uint32(f.info.ID), uint32(maxNr+1)), retENOSYS)
	if f.info == arch.X86_64 {
		f.want("an x32 call", f.decide(uint32(f.info.ID), uint32(arch.X32.SyscallNames["getpid"]|arch.X32.SeccompMask)), retENOSYS)
	}
}

func mapKeys(m map[int]string) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestAllowList(t *testing.T) {
	f := newFilter(t, "ptrace", "socket", "clone3", "clone", "personality")
	f.want("allowed ptrace", f.call("ptrace", 0), retAllow)
	f.want("allowed socket, AF_PACKET", f.call("socket", unix.AF_PACKET, unix.SOCK_RAW, 0), retAllow)
	f.want("allowed clone3", f.call("clone3", 0, 88), retAllow)
	f.want("allowed clone, CLONE_NEWUSER", f.call("clone", unix.CLONE_NEWUSER), retAllow)
	f.want("allowed personality", f.call("personality", 0x0040000), retAllow)
	f.want("unshare, not allowed", f.call("unshare", unix.CLONE_NEWUSER), retEPERM)

	// Everything allowed: the library has nothing to assemble.
	f = newFilter(t, append(slices.Clone(Refused), Conditional...)...)
	f.want("unshare, allowed", f.call("unshare", unix.CLONE_NEWUSER), retAllow)
	f.want("a foreign table, still", f.decide(uint32(arch.I386.ID), 20), retEPERM)

	for _, bad := range []string{"getpid", "no_such_call", ""} {
		if _, err := Program([]string{bad}); err == nil || !strings.Contains(err.Error(), "not a system call the filter refuses") {
			t.Errorf("allow %q: %v, want it refused", bad, err)
		}
	}
}

// The names of both lists exist in the tables of amd64 or arm64 (a typo
// would be skipped silently), and the prologue assembles for both.
func TestNamesAndPrologueOfBothArchitectures(t *testing.T) {
	for _, name := range append(slices.Clone(Refused), Conditional...) {
		_, amd := arch.X86_64.SyscallNames[name]
		_, arm := arch.AARCH64.SyscallNames[name]
		_, i386 := arch.I386.SyscallNames[name] // the ones only 32-bit x86 has, refused in case
		if !amd && !arm && !i386 {
			t.Errorf("%s is a system call of no table", name)
		}
	}
	for _, name := range Conditional {
		for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
			if _, ok := info.SyscallNames[name]; !ok && name != "personality" {
				t.Errorf("%s has no %s", info.Name, name)
			}
		}
	}
	for _, info := range []*arch.Info{arch.X86_64, arch.AARCH64} {
		p, err := prologue(info, map[string]bool{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := bpf.Assemble(append(p, bpf.RetConstant{Val: retAllow})); err != nil {
			t.Errorf("%s: %v", info.Name, err)
		}
	}
}

// The kernel's view: this test's binary, run again, installs the filter
// and makes the calls.
func TestKernelRefusesWithTheFilter(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skip("linux amd64 and arm64 only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKernelHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "CODEXEC_SECCOMP_HELPER=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "helper ok") {
		t.Fatalf("helper did not finish:\n%s", out)
	}
}

func TestKernelHelper(t *testing.T) {
	if os.Getenv("CODEXEC_SECCOMP_HELPER") != "1" {
		t.Skip("run by TestKernelRefusesWithTheFilter")
	}
	prog, err := Program(nil)
	if err != nil {
		t.Fatal(err)
	}
	filters := make([]unix.SockFilter, len(prog)/8)
	for i := range filters {
		b := prog[8*i:]
		filters[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(b), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:])}
	}
	fprog := unix.SockFprog{Len: uint16(len(filters)), Filter: &filters[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	// Every thread of the Go runtime, not only this one.
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog))); e != 0 {
		t.Fatalf("seccomp: %v", e)
	}
	const high = 1 << 32
	for _, c := range []struct {
		what string
		nr   uintptr
		args [3]uintptr
		want unix.Errno
	}{
		{"unshare(CLONE_NEWUSER)", unix.SYS_UNSHARE, [3]uintptr{unix.CLONE_NEWUSER}, unix.EPERM},
		{"socket(AF_PACKET | 1<<32)", unix.SYS_SOCKET, [3]uintptr{unix.AF_PACKET | high, unix.SOCK_RAW, 0x0300}, unix.EPERM},
		{"socket(AF_NETLINK, NETLINK_NETFILTER)", unix.SYS_SOCKET, [3]uintptr{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER}, unix.EPERM},
		{"socket(AF_VSOCK)", unix.SYS_SOCKET, [3]uintptr{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, unix.EPERM},
		{"keyctl(KEYCTL_GET_KEYRING_ID)", unix.SYS_KEYCTL, [3]uintptr{unix.KEYCTL_GET_KEYRING_ID, ^uintptr(1), 1}, unix.EPERM},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [3]uintptr{1, 0}, unix.EPERM},
		{"io_setup(65536)", unix.SYS_IO_SETUP, [3]uintptr{65536, uintptr(unsafe.Pointer(new(uint64)))}, unix.EPERM},
		{"clone3", unix.SYS_CLONE3, [3]uintptr{0, 0}, unix.ENOSYS},
	} {
		_, _, e := unix.Syscall(c.nr, c.args[0], c.args[1], c.args[2])
		if e != c.want {
			t.Errorf("%s: %v, want %v", c.what, e, c.want)
		}
	}
	// What a program does stays possible.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Errorf("socket(AF_INET): %v", err)
	} else {
		unix.Close(fd)
	}
	fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		t.Errorf("socket(AF_NETLINK, NETLINK_ROUTE): %v", err)
	} else {
		unix.Close(fd)
	}
	if out, err := exec.Command("/bin/sh", "-c", "echo forked").Output(); err != nil || string(out) != "forked\n" {
		t.Errorf("fork and exec: %q %v", out, err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); !errors.Is(err, unix.EPERM) {
		t.Errorf("unshare(CLONE_NEWNS): %v, want EPERM", err)
	}
	fmt.Println("helper ok")
}

// Calls a hostile job was found making with the filter installed, each
// now refused: memfd_secret returned a descriptor of secret memory, and
// io_setup(65536) took every native AIO context of the host (fs.aio-nr at
// fs.aio-max-nr), so that the host's own io_setup failed with EAGAIN while
// the job ran.
func TestFoundByTheHostileSuite(t *testing.T) {
	f := newFilter(t)
	f.want("memfd_secret", f.call("memfd_secret", 0), retEPERM)
	for _, name := range []string{"io_setup", "io_submit", "io_getevents", "io_destroy", "io_cancel"} {
		f.want(name, f.call(name, 65536, 0), retEPERM)
	}
}
