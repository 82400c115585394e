// Package seccomp builds the system-call filter every sandboxed job runs
// under: a seccomp BPF program that refuses, with EPERM, the calls a Python
// job never needs and that widen what the kernel exposes to it (namespaces,
// mounts, kernel keys, BPF, io_uring and native AIO, perf events, modules, raw and packet
// sockets, ...), and lets everything else through. It only builds the
// program; worker/runner's zygote.py installs it in each job's process, as
// the last step before the job's code runs (docs/security.md).
//
// github.com/elastic/go-seccomp-bpf holds the system-call tables of each
// architecture and assembles the argument checks of the conditional calls;
// the rest, written here with golang.org/x/net/bpf, does what the library
// cannot express or does slowly (see prologue): the architecture, ENOSYS,
// 32-bit argument checks, and the refusals as a binary search.
package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"strings"

	libseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Refused are the calls the filter refuses outright, whatever their
// arguments; a name the machine's architecture does not have is skipped.
// Each is something a Python job has no use for and that either needs a
// privilege the job does not hold (so refusing it costs nothing) or opens
// kernel code that has been a steady source of privilege escalations.
var Refused = []string{
	// Namespaces: a user namespace gives back every capability, inside it.
	"unshare", "setns",
	// Mounts, old and new API, and changing root.
	"mount", "umount", "umount2", "pivot_root", "chroot",
	"move_mount", "open_tree", "open_tree_attr", "fsopen", "fsmount", "fsconfig", "fspick", "mount_setattr",
	// Kernel attack surface with no use in a job.
	"bpf", "perf_event_open", "userfaultfd",
	// Secret memory: pages taken out of the kernel's direct map, which
	// no Python job asks for.
	"memfd_secret",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Native asynchronous I/O: its contexts come from one budget for the
	// whole host (fs.aio-max-nr), which one io_setup of a job could take
	// whole, failing every other program's, the host's services' included,
	// for as long as the job or its context lived. glibc's aio_* functions
	// (threads) do not use it.
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
	"add_key", "request_key", "keyctl",
	// Other processes' memory (a debugger's calls; jobs are not debugged).
	"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	// The machine's: modules, kexec, swap, reboot, accounting, clocks,
	// names, quotas, the kernel log, I/O ports.
	"init_module", "finit_module", "delete_module", "create_module", "query_module", "get_kernel_syms",
	"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct",
	"settimeofday", "stime", "clock_settime", "clock_adjtime",
	"sethostname", "setdomainname", "quotactl", "quotactl_fd", "syslog", "vhangup",
	"iopl", "ioperm", "modify_ldt", "vm86", "vm86old",
	// Files by handle (around the mount view), fanotify, obsolete calls.
	"name_to_handle_at", "open_by_handle_at", "fanotify_init",
	"lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
}

// Conditional are the calls refused for some arguments only (Program's doc
// says which). Like Refused, each may be named in an allow list, which lets
// it through whatever its arguments.
var Conditional = []string{"clone", "clone3", "socket", "personality"}

// Namespace flags of clone(2): a process must not start one in new
// namespaces, as it must not unshare.
const cloneNamespaces = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// Offsets in struct seccomp_data: nr (int), arch (u32), instruction pointer
// (u64), args (u64[6]). The machines supported are little-endian: the low
// 32 bits of an argument come first.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// Return values of the program.
const (
	retAllow  = uint32(libseccomp.ActionAllow)
	retEPERM  = uint32(libseccomp.ActionErrno) | uint32(unix.EPERM)
	retENOSYS = uint32(libseccomp.ActionErrno) | uint32(unix.ENOSYS)
)

// Program returns the filter for the machine's architecture (amd64 or
// arm64), as the bytes of an array of struct sock_filter in the machine's
// byte order: what prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER) and
// bubblewrap's --seccomp take. It refuses with EPERM:
//
//   - every call of Refused;
//   - clone with a namespace flag;
//   - socket of any family but AF_UNIX, AF_INET, AF_INET6 and AF_NETLINK,
//     a netlink socket of any protocol but NETLINK_ROUTE (what glibc's
//     getaddrinfo and if_nameindex use), SOCK_RAW or SOCK_PACKET
//     sockets of AF_INET and AF_INET6, and inet sockets of a protocol
//     other than TCP, UDP and ICMP (ping), such as MPTCP or UDP-Lite;
//   - personality other than reading it or setting the default (the one
//     use of changing it is turning off address randomisation);
//   - a call through another architecture's system-call table (i386's
//     int 0x80 on amd64), which would otherwise slip past every check;
//
// and answers ENOSYS, as a kernel without them would, to clone3 (whose
// flags lie in memory a filter cannot read; glibc then falls back to clone)
// and to calls newer than the library's tables, which a list of refusals
// cannot judge.
//
// allow names calls of Refused or Conditional to let through (an operator's
// --seccomp-allow, e.g. ptrace for a debugger); any other name is an error.
func Program(allow []string) ([]byte, error) {
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		return nil, fmt.Errorf("seccomp: no filter for %s (amd64 and arm64 only)", runtime.GOARCH)
	}
	// The library assembles for runtime.GOARCH (its Policy has no exported
	// field for another), so the tables must be that architecture's too.
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	if err := Check(allow); err != nil {
		return nil, err
	}
	allowed := map[string]bool{}
	for _, name := range allow {
		allowed[name] = true
	}

	var conds []libseccomp.NameWithConditions
	if !allowed["clone"] {
		conds = append(conds, libseccomp.NameWithConditions{Name: "clone", Conditions: libseccomp.ArgumentConditions{
			{Argument: 0, Operation: libseccomp.BitsSet, Value: cloneNamespaces},
		}})
	}
	if !allowed["personality"] {
		// Any bit of the low 32 set (personality takes an unsigned int),
		// and not 0xffffffff, the query. High bits with a low half of 0
		// are let through: the kernel reads that as PER_LINUX, the default.
		conds = append(conds, libseccomp.NameWithConditions{Name: "personality", Conditions: libseccomp.ArgumentConditions{
			{Argument: 0, Operation: libseccomp.BitsSet, Value: 0xffffffff},
			{Argument: 0, Operation: libseccomp.NotEqual, Value: 0xffffffff},
		}})
	}
	groups := []libseccomp.SyscallGroup{{NamesWithCondtions: conds, Action: libseccomp.ActionErrno}}
	var body []bpf.Instruction
	if len(conds) > 0 {
		policy := libseccomp.Policy{DefaultAction: libseccomp.ActionAllow, Syscalls: groups}
		if body, err = policy.Assemble(); err != nil {
			return nil, fmt.Errorf("seccomp: %w", err)
		}
	} else {
		body = []bpf.Instruction{bpf.RetConstant{Val: retAllow}}
	}
	pro, err := prologue(info, allowed)
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(append(pro, body...))
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// Check says whether every name of allow is one Program accepts: a call of
// Refused or Conditional, on any architecture.
func Check(allow []string) error {
	for _, name := range allow {
		if !slices.Contains(Refused, name) && !slices.Contains(Conditional, name) {
			return fmt.Errorf("seccomp: %q is not a system call the filter refuses; it refuses %s, and %s for some arguments",
				name, strings.Join(Refused, ", "), strings.Join(Conditional, ", "))
		}
	}
	return nil
}

// prologue runs before the library's program and decides what the library
// cannot express:
//
//   - the architecture: the library sends a call of a foreign table to its
//     default action, which for a list of refusals is "allow";
//   - ENOSYS (its refusals are all EPERM);
//   - comparisons of an int argument: the library compares all 64 bits of
//     an argument, but the kernel reads an int argument from the low 32
//     only, so socket(AF_PACKET | 1<<32, ...) would pass an "equal to
//     AF_PACKET" check and open a packet socket. Here int arguments are
//     loaded and compared 32 bits wide;
//   - the calls refused whatever their arguments (Refused), found by a
//     binary search on their numbers rather than the library's list.
//
// Anything it does not decide falls through to the library's program (the
// conditional calls), which starts by loading what it needs.
func prologue(info *arch.Info, allowed map[string]bool) ([]bpf.Instruction, error) {
	maxNr := 0
	for nr := range info.SyscallNumbers {
		maxNr = max(maxNr, nr)
	}
	a := &assembler{}
	a.emit(bpf.LoadAbsolute{Off: offArch, Size: 4})
	a.jeq(uint32(info.ID), "", "eperm")
	a.emit(bpf.LoadAbsolute{Off: offNr, Size: 4})
	// Newer than the tables (and amd64's x32 calls, numbered from 1<<30).
	a.jgt(uint32(maxNr), "enosys", "")
	if !allowed["clone3"] {
		a.jeq(uint32(info.SyscallNames["clone3"]), "enosys", "")
	}
	if !allowed["socket"] {
		a.jeq(uint32(info.SyscallNames["socket"]), "", "refused")
		a.emit(bpf.LoadAbsolute{Off: offArgs, Size: 4}) // domain
		a.jeq(unix.AF_UNIX, "allow", "")
		a.jeq(unix.AF_INET, "inet", "")
		a.jeq(unix.AF_INET6, "inet", "")
		a.jeq(unix.AF_NETLINK, "", "eperm")
		a.emit(bpf.LoadAbsolute{Off: offArgs + 2*8, Size: 4}) // protocol
		a.jeq(unix.NETLINK_ROUTE, "allow", "eperm")
		a.label("inet")
		a.emit(bpf.LoadAbsolute{Off: offArgs + 1*8, Size: 4}) // type, with SOCK_CLOEXEC and SOCK_NONBLOCK
		a.emit(bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: 0xf})
		a.jeq(unix.SOCK_RAW, "eperm", "")
		a.jeq(unix.SOCK_PACKET, "eperm", "")
		// The protocols a Python job uses (0 picks TCP or UDP by type);
		// the others (MPTCP, UDP-Lite, SCTP, ...) are kernel code a job
		// never needs to reach.
		a.emit(bpf.LoadAbsolute{Off: offArgs + 2*8, Size: 4}) // protocol
		a.jeq(0, "allow", "")
		a.jeq(unix.IPPROTO_TCP, "allow", "")
		a.jeq(unix.IPPROTO_UDP, "allow", "")
		a.jeq(unix.IPPROTO_ICMP, "allow", "")
		a.jeq(unix.IPPROTO_ICMPV6, "allow", "eperm")
	}
	a.label("refused")
	// The calls refused whatever their arguments, as a binary search on
	// their numbers. As a list (the library's way) every call not in it
	// went through the whole list, about 75 comparisons: when a filter is
	// installed the kernel runs it once for each call of the table to
	// find the calls it always allows (seccomp's action cache), and the
	// kernel compiles it: installing it took 157 µs of every job's set-up
	// here. A search takes about eight comparisons a call, and makes a
	// shorter program.
	var nrs []uint32
	for _, name := range Refused {
		if nr, ok := info.SyscallNames[name]; ok && !allowed[name] {
			nrs = append(nrs, uint32(nr))
		}
	}
	slices.Sort(nrs)
	a.search(slices.Compact(nrs), "eperm", "library")
	a.label("eperm")
	a.emit(bpf.RetConstant{Val: retEPERM})
	a.label("enosys")
	a.emit(bpf.RetConstant{Val: retENOSYS})
	a.label("allow")
	a.emit(bpf.RetConstant{Val: retAllow})
	a.label("library")
	return a.resolve()
}

// assembler is a few BPF instructions with jumps to named labels; "" is
// the next instruction.
type assembler struct {
	ins      []bpf.Instruction
	jumps    []pending
	labels   map[string]int
	searches int // labels made by search
}

type pending struct {
	at          int
	true, false string
}

func (a *assembler) emit(i bpf.Instruction) { a.ins = append(a.ins, i) }

// search jumps to hit when the accumulator is one of nrs (sorted, without
// repeats), to miss otherwise (both labels ahead): a binary search on the
// runs of consecutive numbers (62 calls make 25 runs on amd64), down to at
// most three runs, each then two comparisons.
func (a *assembler) search(nrs []uint32, hit, miss string) {
	var runs [][2]uint32
	for _, nr := range nrs {
		if n := len(runs); n > 0 && runs[n-1][1]+1 == nr {
			runs[n-1][1] = nr
		} else {
			runs = append(runs, [2]uint32{nr, nr})
		}
	}
	a.searchRuns(runs, hit, miss)
}

func (a *assembler) searchRuns(runs [][2]uint32, hit, miss string) {
	if len(runs) == 0 {
		a.jump(miss)
		return
	}
	if len(runs) <= 3 {
		for i, r := range runs {
			next := miss
			if i < len(runs)-1 {
				a.searches++
				next = fmt.Sprintf("search.%d", a.searches)
			}
			a.jgt(r[1], next, "")
			a.jge(r[0], hit, miss)
			if next != miss {
				a.label(next)
			}
		}
		return
	}
	mid := len(runs) / 2
	a.searches++
	upper := fmt.Sprintf("search.%d", a.searches)
	a.jgt(runs[mid-1][1], upper, "")
	a.searchRuns(runs[:mid], hit, miss)
	a.label(upper)
	a.searchRuns(runs[mid:], hit, miss)
}

func (a *assembler) jeq(v uint32, t, f string) { a.cond(bpf.JumpEqual, v, t, f) }
func (a *assembler) jgt(v uint32, t, f string) { a.cond(bpf.JumpGreaterThan, v, t, f) }
func (a *assembler) jge(v uint32, t, f string) { a.cond(bpf.JumpGreaterOrEqual, v, t, f) }

func (a *assembler) cond(c bpf.JumpTest, v uint32, t, f string) {
	a.jumps = append(a.jumps, pending{at: len(a.ins), true: t, false: f})
	a.emit(bpf.JumpIf{Cond: c, Val: v})
}

// jump jumps always (to a label after it).
func (a *assembler) jump(to string) {
	a.jumps = append(a.jumps, pending{at: len(a.ins), true: to})
	a.emit(bpf.Jump{})
}

func (a *assembler) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.ins)
}

func (a *assembler) resolve() ([]bpf.Instruction, error) {
	skip := func(from int, to string) (int, error) {
		if to == "" {
			return 0, nil
		}
		at, ok := a.labels[to]
		if !ok || at <= from {
			return 0, fmt.Errorf("seccomp: label %q is not ahead of instruction %d", to, from)
		}
		return at - from - 1, nil
	}
	for _, j := range a.jumps {
		t, err := skip(j.at, j.true)
		if err != nil {
			return nil, err
		}
		f, err := skip(j.at, j.false)
		if err != nil {
			return nil, err
		}
		switch ins := a.ins[j.at].(type) {
		case bpf.Jump:
			ins.Skip = uint32(t)
			a.ins[j.at] = ins
		case bpf.JumpIf:
			if t > 255 || f > 255 {
				return nil, fmt.Errorf("seccomp: jump too long at instruction %d", j.at)
			}
			ins.SkipTrue, ins.SkipFalse = uint8(t), uint8(f)
			a.ins[j.at] = ins
		}
	}
	return a.ins, nil
}
