# codexec zygote: a warm Python interpreter that forks one child per job.
#
# worker/runner (zygote_linux.go) starts it as
#
#     python -c BOOTSTRAP CONFIG
#
# with fd 3 a SOCK_SEQPACKET Unix socket to the worker, stdin on /dev/null and
# stdout and stderr on a pipe that the worker logs. BOOTSTRAP reads this file,
# the first datagram on fd 3, and executes it under the name <codexec-zygote>;
# CONFIG is a JSON object: {"preload": ["module", ...], "sandbox": {...}}
# ("config" in zygote_protocol.json). "sandbox" says the zygote runs as root
# in a bubblewrap sandbox (worker/sandbox) and must confine each child: see
# _enter_namespaces and _confine.
#
# The protocol on fd 3, one JSON object per datagram (ready, run, started,
# failed, kill, exited), is described in zygote_protocol.md and specified in
# zygote_protocol.json, next to this file; testdata/test_zygote.py checks
# this file against it. End of file on fd 3 means the worker is gone: the
# zygote kills every job it started and exits.
#
# Latency: forking a process of tens of megabytes, and the copy-on-write
# faults of its first steps, cost more than a small job itself. So the zygote
# keeps a child forked ahead of time, a spare, that has done every step
# that does not depend on the job (_prepare_child) and waits on a socket of
# its own for one. A job goes to the oldest spare; a new spare is forked when
# the zygote has nothing else to do, so the fork is not on the job's path. A
# sandboxed spare takes longer to prepare (namespaces, mounts) than a caller
# takes to send its next job, so a sandboxed zygote keeps two: the next job
# finds one ready while the one after it is being prepared. The job's exit
# status is always its process's wait status, never anything the job wrote.
# Unsandboxed, and in a sandbox where the zygote has its small init
# (_init_program), the spare is the job's process and the zygote reaps it
# itself; in a sandbox it is pid 2 of a PID namespace of its own, whose init
# (pid 1) is that small program, not a copy of the interpreter, and killing
# the init ends everything the job started. Without the small init (another
# machine, rootless) the spare is the init of its PID namespace, runs no job
# code, forks the job's process and sends that process's wait status on its
# socket as soon as it has reaped it.

import atexit
import builtins
import errno
import gc
import json
import os
import select
import signal
import socket
import stat
import struct
import sys
import time

gc.disable()  # no collections in the zygote: fewer pages dirtied before a fork

_ZYGOTE_FILE = '<codexec-zygote>'
# The names the interpreter put in __main__ before any code ran (this file
# runs in that module, after the bootstrap's names, which are not dunders).
_MAIN_NAMES = [k for k in globals() if k[:2] == '__' == k[-2:]]
_MAX_MSG = 1 << 20
_BUF = bytearray(_MAX_MSG)  # every request is read into it: no allocation per job
# What a spare rehearses a job's steps with (_rehearse_job): a request of no
# session's, shaped like a job's (the worker's environment, a script path).
_REHEARSAL = json.dumps({'script': '/codexec-rehearsal/job.py', 'dir': '/',
                         'env': ['%s=%s' % kv for kv in os.environ.items()],
                         'rlimits': [[0, -1, -1]] * 6}).encode()
_ANC_SPACE = socket.CMSG_SPACE(16 * 4)
_MAX_CLONES = 8  # mount clones a run request may carry (a job has two binds)

try:
    import ctypes

    _libc = ctypes.CDLL(None, use_errno=True)
    _prctl = _libc.prctl
    # Made here, once, in the zygote, rather than in each job's process:
    # ctypes resolves a libc function at its first use and keeps it, and
    # makes an array type at its first use too (about 0.1 ms of a job's
    # set-up, when the job's process was the first).
    for _name in ('mount', 'umount2', 'setns', 'unshare', 'capset', 'syscall'):
        getattr(_libc, _name)
    # capset(2)'s header (version 3, this process) and empty sets.
    _CAP_HEADER = (ctypes.c_uint32 * 2)(0x20080522, 0)
    _CAP_EMPTY = (ctypes.c_uint32 * 6)()
except Exception:  # an interpreter without ctypes: jobs outlive a killed zygote
    _libc = _prctl = _CAP_HEADER = _CAP_EMPTY = None
_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 22, 2
_CLONE_NEWNS = 0x00020000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_SLAVE = 32, 4096, 16384, 1 << 19
_MNT_DETACH = 2
# move_mount(2): its number is the same on every machine the worker sends
# mount clones from (amd64, arm64: zygoteSandboxCfg.Clones).
_SYS_MOVE_MOUNT, _MOVE_MOUNT_F_EMPTY_PATH, _AT_FDCWD = 429, 4, -100

try:
    import resource
except ImportError:
    resource = None

try:
    from importlib.machinery import SourceFileLoader as _SourceFileLoader
except ImportError:
    _SourceFileLoader = None

_KEEPER = None  # _keeper(), made by _main

# Rich output: richout.py, whose source the worker sets as _RICHOUT_SOURCE in
# a line before this file's (zygote.go), compiled once by _main and called
# around each job's code. None when this file runs alone.
_richout = None


def _send(sock, obj):
    sock.send(json.dumps(obj, separators=(',', ':')).encode())


# The two messages of every job, formatted without the json module: its
# encoder, run in the zygote after each fork, wrote about 40 pages that the
# fork had shared (a copy-on-write fault and 4 KiB copied each, every job).
# Both carry integers only (a job id the zygote checked is an int, a pid, a
# wait status), whose JSON is their decimal digits.
def _started(jid, pid):
    return b'{"op":"started","id":%d,"pid":%d}' % (jid, pid)


def _exited(jid, status):
    return b'{"op":"exited","id":%d,"status":%d}' % (jid, status)


def _flush_std():
    """Flush sys.stdout and sys.stderr as interpreter shutdown does; report
    whether stdout could be flushed (a failure makes the exit status 120)."""
    ok = True
    for name in ('stdout', 'stderr'):
        f = getattr(sys, name, None)
        if f is None:
            continue
        try:
            if f.closed:
                continue
            f.flush()
        except Exception as e:
            if name == 'stdout':
                ok = False
                _write_unraisable(e, f)
    return ok


def _write_unraisable(e, obj):
    try:
        import traceback

        err = sys.stderr
        if err is None:
            return
        err.write('Exception ignored in: %r\n' % (obj,))
        traceback.print_exception(type(e), e, e.__traceback__, file=err)
        err.flush()
    except Exception:
        pass


def _kill_group(pid):
    """SIGKILL the process group led by pid, and pid itself in case it is not
    a group leader yet."""
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _kill_job(pid, init):
    """End a job: its process group, and with the init of its PID
    namespace (when it has a small one) every process in that namespace."""
    _kill_group(pid)
    if init is not None:
        try:
            os.kill(init, signal.SIGKILL)
        except OSError:
            pass


# The init of each sandboxed job's PID namespace, as machine code (x86-64):
# a process of a few pages in place of a second fork of the interpreter.
# It holds nothing and runs nothing of the job's; as its namespace's init
# the kernel keeps from it every signal a process of the namespace sends;
# it reaps what the job orphans, and its death, which only the zygote can
# bring about (SIGKILL from outside the namespace) or the zygote's own,
# ends every process of the namespace. Assembled from:
#
#   xor eax, eax; push rax; mov eax, 0x74696e69;      prctl(PR_SET_NAME, "codexec-init"): its
#     push rax; mov rax, 0x2d63657865646f63;          name in ps, not its memfd's descriptor
#     push rax; mov eax, 157; mov edi, 15;
#     mov rsi, rsp; syscall; add rsp, 24
#   mov eax, 157; mov edi, 1; mov esi, 9; syscall     prctl(PR_SET_PDEATHSIG, SIGKILL)
#   mov eax, 436; xor edi, edi; mov esi, -1; xor edx, edx; syscall
#                                                     close_range(0, ~0U, 0)
#   test rax, rax; jz masked; xor edi, edi            failing that (before Linux 5.9):
#   closeloop: mov eax, 3; syscall; inc edi;          close(0) ... close(1023)
#     cmp edi, 1024; jb closeloop
#   masked: push 0x10000; mov eax, 14; xor edi, edi;  rt_sigprocmask(SIG_BLOCK, {SIGCHLD}, NULL, 8):
#     mov rsi, rsp; xor edx, edx; mov r10d, 8; syscall  a blocked SIGCHLD is queued, not ignored
#   reap: mov eax, 61; or rdi, -1; xor esi, esi;      wait4(-1, NULL, 0, NULL)
#     xor edx, edx; xor r10d, r10d; syscall
#     test rax, rax; jns reap                         reaped one: the next
#     mov eax, 128; mov rdi, rsp; xor esi, esi;       no child: rt_sigtimedwait({SIGCHLD}, NULL, NULL, 8)
#     xor edx, edx; mov r10d, 8; syscall; jmp reap    until one of the namespace ends
_INIT_X86_64 = bytes.fromhex(
    '31c050b8696e69745048b8636f64657865632d50b89d000000bf0f0000004889e60f054883c418b8'
    '9d000000bf01000000be090000000f05b8b401000031ffbeffffffff31d20f054885c0741331ffb8'
    '030000000f05ffc781ff0004000072ef6800000100b80e00000031ff4889e631d241ba080000000f'
    '05b83d0000004883cfff31f631d24531d20f054885c079e9b8800000004889e731f631d241ba0800'
    '00000f05ebd3'
)


def _init_program():
    """The small init as an ELF executable for this machine, or None where
    there is none (the interpreter is then forked twice per job)."""
    if os.uname().machine != 'x86_64':
        return None
    base, head = 0x400000, 64 + 2 * 56
    size = head + len(_INIT_X86_64)
    ehdr = struct.pack('<4sBBBBB7xHHIQQQIHHHHHH', b'\x7fELF', 2, 1, 1, 0, 0,
                       2, 62, 1, base + head, 64, 0, 0, 64, 56, 2, 0, 0, 0)
    load = struct.pack('<IIQQQQQQ', 1, 5, 0, base, base, size, size, 0x1000)  # PT_LOAD, r-x
    stack = struct.pack('<IIQQQQQQ', 0x6474E551, 6, 0, 0, 0, 0, 0, 16)  # PT_GNU_STACK, rw-
    return ehdr + load + stack + _INIT_X86_64


def _open_init():
    """A descriptor on the small init, in memory (memfd), tried once: None
    where it cannot be made or run (another machine, exec from memory
    refused)."""
    prog = _init_program()
    if prog is None or not hasattr(os, 'memfd_create') or not hasattr(os, 'posix_spawn'):
        return None
    try:
        fd = os.memfd_create('codexec-init', os.MFD_CLOEXEC)
    except OSError:
        return None
    try:
        os.write(fd, prog)
        pid = _spawn_init(fd)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return fd
    except OSError as e:
        os.write(2, ('codexec: zygote: no small init (%s): two forks per job\n' % e).encode())
        os.close(fd)
        return None


def _spawn_init(fd):
    """Start the small init (vfork and exec: the interpreter is not
    copied); in a new PID namespace it is that namespace's pid 1."""
    return os.posix_spawn('/proc/self/fd/%d' % fd, ['codexec-init'], {})


# The keeper (_keep_address_space), as x86-64 machine code: a function
# long keep(void *stack_top) that makes the keeper and returns its pid (or
# -errno), all its steps system calls, none of them Python's: done in
# Python (signal.pthread_sigmask, os.chdir, ctypes' close_range and
# clone) they took 0.46 ms at the end of every job, mostly the first
# writes of a forked interpreter to the pages that code touches. Assembled
# from:
#
#   mov r8, rdi; sub rsp, 24                          the stack top; room for two signal sets
#   mov qword ptr [rsp], -1; mov eax, 14;             rt_sigprocmask(SIG_BLOCK, all, &old, 8): the
#     xor edi, edi; mov rsi, rsp;                     keeper starts with every signal blocked, so
#     lea rdx, [rsp+8]; mov r10d, 8; syscall          no handler of the job's ever runs in it
#   mov eax, 39; syscall; mov r9, rax                 getpid(): the keeper's parent, for its check
#   mov eax, 56; mov edi, 0x111; mov rsi, r8;         clone(CLONE_VM | SIGCHLD, stack top, 0, 0, 0)
#     xor edx, edx; xor r10d, r10d; xor r8d, r8d; syscall
#   test rax, rax; jz child
#   mov r9, rax; mov eax, 14; mov edi, 2;             this process: rt_sigprocmask(SIG_SETMASK,
#     lea rsi, [rsp+8]; xor edx, edx;                 &old, NULL, 8), then return the pid
#     mov r10d, 8; syscall
#   mov rax, r9; add rsp, 24; ret
#   child: mov eax, 157; mov edi, 1; mov esi, 9;      the keeper, on its own stack, touching no
#     syscall                                         memory: prctl(PR_SET_PDEATHSIG, SIGKILL), it
#                                                     dies with the job's process, whoever ends it
#   mov eax, 110; syscall; cmp rax, r9; jne gone      getppid(): unless that process ended already
#   mov eax, 436; xor edi, edi;                       close_range(0, ~0U, 0)
#     mov esi, -1; xor edx, edx; syscall
#   test rax, rax; jz closed; xor edi, edi            failing that (before Linux 5.9):
#   closeloop: mov eax, 3; syscall; inc edi;          close(0) ... close(1023)
#     cmp edi, 1024; jb closeloop
#   closed: lea rdi, [rip+slash]; mov eax, 80;        chdir("/"): not the job's working directory
#     syscall                                         (a session's file system)
#   pauseloop: mov eax, 34; syscall; jmp pauseloop    pause() until SIGKILL
#   gone: mov eax, 60; xor edi, edi; syscall          exit(0)
#   slash: .byte 0x2f, 0
_KEEPER_X86_64 = bytes.fromhex(
    '4989f84883ec1848c70424ffffffffb80e00000031ff4889e6488d54240841ba080000000f05b827'
    '0000000f054989c1b838000000bf110100004c89c631d24531d24531c00f054885c074244989c1b8'
    '0e000000bf02000000488d74240831d241ba080000000f054c89c84883c418c3b89d000000bf0100'
    '0000be090000000f05b86e0000000f054c39c8753fb8b401000031ffbeffffffff31d20f054885c0'
    '741331ffb8030000000f05ffc781ff0004000072ef488d3d19000000b8500000000f05b822000000'
    '0f05ebf7b83c00000031ff0f052f00'
)
_PROT_READ, _PROT_EXEC = 1, 4


def _keeper():
    """(function, stack top) for _keep_address_space, made once in the
    zygote (every job inherits them): the keeper's code in a page of its
    own, read and execute only, and a stack. None where there is no keeper
    (not x86-64, no ctypes): a job's exit then tears its address space
    down on the job's path, as it always did."""
    if _libc is None or os.uname().machine != 'x86_64':
        return None
    try:
        import mmap
        page = mmap.PAGESIZE
        # Private, as every map a job inherits from the zygote must be: a
        # shared one (mmap's default) is one page for the zygote and every
        # job of every session, which a job could make writable (mprotect)
        # and fill with code that the next job of another session runs at
        # its exit, as that session.
        code = mmap.mmap(-1, page, flags=mmap.MAP_PRIVATE)
        code.write(_KEEPER_X86_64)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(code))
        if _libc.mprotect(ctypes.c_void_p(addr), page, _PROT_READ | _PROT_EXEC) != 0:
            return None
        stack = mmap.mmap(-1, 4 * page, flags=mmap.MAP_PRIVATE)
        top = ctypes.addressof(ctypes.c_char.from_buffer(stack)) + 4 * page - 64
        fn = ctypes.cast(addr, ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_void_p))
        return fn, top, (code, stack)  # the maps stay referenced: never unmapped
    except Exception:
        return None


def _keep_address_space():
    """Leave the job's address space to a keeper, so that this process's
    exit is quick: a process whose memory no other process shares tears it
    down (a forked interpreter's whole page tables, 1 to 3 ms here) before
    its parent hears that it exited, which put that teardown between the
    job's last output and its result. The keeper is a process made with
    clone(CLONE_VM) that shares this address space and runs a few
    instructions of machine code (_KEEPER_X86_64), never Python: it closes
    every descriptor and leaves the job's working directory, then waits
    with every signal blocked, so only SIGKILL ends it, and the teardown is
    its exit's. That SIGKILL is its parent-death signal: it dies as this
    process ends, whatever becomes of the zygote (which kills the job's
    group or PID namespace too, once it has the job's status: reap,
    finish), and a keeper whose parent ended before it could ask for the
    signal exits at once. Its parent's exit, not its own, is what the
    zygote hears of. It runs as the job's uid under the job's
    system-call filter, in its cgroups and namespaces, and is made after
    the job's code and its shutdown ran: the job never sees it. Returns
    the keeper's pid, or None where it cannot be made (no keeper, the job's
    process limit reached): the exit is then as before."""
    if _KEEPER is None:
        return None
    fn, top, _ = _KEEPER
    try:
        pid = fn(top)
    except BaseException:
        return None
    return pid if pid > 0 else None


def _threads():
    """Names of the threads besides the main one, Python's and native."""
    names = []
    th = sys.modules.get('threading')
    if th is not None:
        main = th.main_thread()
        names = [t.name for t in th.enumerate() if t is not main]
    try:
        tasks = len(os.listdir('/proc/self/task'))
    except OSError:
        tasks = 1
    if tasks - 1 > len(names):
        names.append('%d native thread(s)' % (tasks - 1 - len(names)))
    return names


def _wait_status(info):
    """The wait status, as os.waitpid gives it, of a child that waitid
    found exited (info, from waitid with WEXITED)."""
    if info.si_code == os.CLD_EXITED:
        return (info.si_status & 0xFF) << 8
    if info.si_code == os.CLD_DUMPED:
        return (info.si_status & 0x7F) | 0x80
    return info.si_status & 0x7F  # CLD_KILLED


class _Job:
    __slots__ = ('id', 'sock', 'done', 'net', 'context', 'init')

    def __init__(self, jid, sock, net, context=False, init=None):
        self.id = jid
        self.sock = sock  # the socket the job went on (A reports on it), until it closes
        self.done = False  # the worker was told how it ended
        self.net = net  # the key of the session network namespace it joined, or None
        self.context = context  # a context's interpreter: lives between calls, mostly idle
        self.init = init  # the pid of its PID namespace's small init (_spawn_init), or None


# How long a session's network namespace stays open with no job of the
# session started or running: the next job of the session after that gets
# a new one.
_NETNS_IDLE = 60.0

# How many sessions' network namespaces the zygote keeps open at once: past
# it, the one idle the longest (no job of its session running) is closed
# before another is made. Each takes about 150 KiB of the kernel's memory,
# charged to no job's cgroup, and every HTTP session is a session: without
# a bound, a client that ran one call in each of thousands of new sessions
# a minute kept thousands open on each zygote.
_NETNS_MAX = 128


def _spares(sandbox):
    n = sandbox.get('spares')
    return n if type(n) is int and n >= 1 else 2


class _Zygote:
    def __init__(self, ctl, sandbox):
        self.ctl = ctl
        self.sandbox = sandbox  # None, or {"netns": bool}
        self.pid = os.getpid()
        self.sigchld = signal.getsignal(signal.SIGCHLD)
        self.wakeup = None
        self.poller = None
        self.spares = []  # (pid, socket, init) of each child waiting for a job, oldest first
        self.nspares = 1 if sandbox is None else _spares(sandbox)
        self.spare_failed = False
        self.cgroup_dirs = []  # learn_cgroup_dirs
        self.last_run = None  # the last run request's header, for the rehearsal
        # Network namespaces per session (session_netns): the zygote's own
        # network namespace, to return to after making one, and session ->
        # [namespace descriptor, last use]. None: each spare makes one of
        # its own (_enter_namespaces), where the zygote may not setns(2)
        # back to its own.
        self.nethome = None
        self.netns = {}
        if sandbox is not None and sandbox.get('netns'):
            fd = os.open('/proc/self/ns/net', os.O_RDONLY | os.O_CLOEXEC)
            try:
                _libc_call('setns', fd, _CLONE_NEWNET)
                self.nethome = fd
            except OSError:
                os.close(fd)
        self.jobs = {}  # pid -> _Job, until reaped
        self.by_fd = {}  # job socket fd -> pid
        # In a sandbox each spare is the init of a PID namespace of its own
        # (fork_in_pid_namespace): the zygote's own namespace, to return to
        # after each. Where the zygote may not setns(2) to it (rootless:
        # bubblewrap's PID namespace belongs to a user namespace above the
        # zygote's), the spare makes the namespace and forks its init
        # (_enter_pid_namespace), a fork more per job.
        self.pidns = None
        if sandbox is not None:
            fd = os.open('/proc/self/ns/pid', os.O_RDONLY | os.O_CLOEXEC)
            try:
                _libc_call('setns', fd, _CLONE_NEWPID)
                self.pidns = fd
            except OSError:
                os.close(fd)
        # Where it can, the zygote gives each spare's PID namespace a small
        # init of machine code (_init_program) instead of a second fork of
        # the interpreter: None where it cannot (_open_init).
        self.init_fd = None
        if self.pidns is not None and not sandbox.get('interpreter_init'):
            self.init_fd = _open_init()
        if sandbox is not None and sandbox.get('clones'):
            # Each job's directories come with its request (mount clones,
            # _attach_clones): no child needs any session's, so the zygote
            # takes them all out of its own view, once. Each spare's mount
            # namespace, a copy of this one, then starts without them: no
            # copy of every session's mounts to make, and to unmount, per
            # spare.
            for root in sandbox.get('hidden') or ():
                _detach(root)

    def preload(self, names):
        loaded, failed = [], {}
        for name in names:
            try:
                __import__(name)
                loaded.append(name)
            except BaseException as e:  # a module may even raise SystemExit
                failed[name] = '%s: %s' % (type(e).__name__, e)
        return loaded, failed

    def serve(self):
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        os.set_blocking(wfd, False)
        self.wakeup = (rfd, wfd)
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.poller = select.poll()
        self.poller.register(self.ctl.fileno(), select.POLLIN)
        self.poller.register(rfd, select.POLLIN)
        ctl = self.ctl.fileno()
        while True:
            idle = len(self.spares) < self.nspares and not self.spare_failed and self.idle()
            events = self.poller.poll(0 if idle else self.close_idle_netns())
            if not events:
                if not idle:
                    continue  # a session's network namespace was due to close
                # Nothing to do: fork the next job's process ahead of time.
                # Not while a job runs: on a small machine the fork would
                # slow the job down more than it saves the next one.
                spare = self.fork_spare()
                self.spare_failed = spare is None
                if spare is not None:
                    self.spares.append(spare)
                    self.rehearse()
                continue
            self.spare_failed = False
            for fd, _ in events:
                if fd == rfd:
                    try:
                        while os.read(rfd, 512):
                            pass
                    except BlockingIOError:
                        pass
                    self.reap()
                elif fd == ctl:
                    if not self.receive():
                        self.shutdown()
                else:
                    self.report(fd)

    def rehearse(self):
        """Copy ahead the pages that handling a run request writes. A fork
        shares every page of the zygote with the spare, copy-on-write: the
        zygote's first write to each after the fork copies it (a fault and
        4 KiB), and handling a request writes a few hundred (reference
        counts, the allocator's pools, the frame stack), which put about
        0.35 ms on the next job's path, against 0.04 ms with no fork since
        (json.loads and json.dumps of a request, measured here). So after
        each fork the zygote goes through the last request it had once
        more, acting on nothing: decoded, and its answers encoded and sent
        nowhere."""
        msg = self.last_run
        if msg is None:
            return
        try:
            hdr = json.loads(msg)
            jid = hdr.get('id')
            hdr.get('net')
            hdr.get('unmount') == self.cgroup_dirs
            hdr.get('context')
            _started(jid, self.pid)
            _exited(jid, 0)
            struct.pack('4i', 0, 1, 2, 3)
            time.monotonic()
        except Exception:
            pass

    def idle(self):
        # A context waits for its next call most of its life: it does not
        # keep the zygote from preparing spares.
        for job in self.jobs.values():
            if not job.done and not job.context:
                return False
        return True

    def close_idle_netns(self):
        """Close the network namespaces of sessions with no job started
        for _NETNS_IDLE seconds and none running; return the milliseconds
        until the next one is due (None: none open)."""
        if not self.netns:
            return None
        now = time.monotonic()
        busy = {job.net for job in self.jobs.values() if not job.done}
        due = None
        for key, entry in list(self.netns.items()):
            if key in busy:
                entry[1] = now
            left = entry[1] + _NETNS_IDLE - now
            if left <= 0:
                os.close(entry[0])
                del self.netns[key]
            elif due is None or left < due:
                due = left
        return None if due is None else int(due * 1000) + 1

    def close_oldest_idle_netns(self):
        """Close the network namespace of the session idle the longest,
        of those with no job running (none when every one has)."""
        busy = {job.net for job in self.jobs.values() if not job.done}
        idle = [(entry[1], key) for key, entry in self.netns.items() if key not in busy]
        if idle:
            key = min(idle)[1]
            os.close(self.netns.pop(key)[0])

    def session_netns(self, hdr):
        """(key, descriptor) of the network namespace of the job's session
        (the header's net: an opaque token of the session's, so that no
        session's name is in the memory the spares are forked with), made
        on the session's first job: a loopback, up, and nothing else. A job
        that names none gets one of its own: (None, a descriptor the caller
        closes)."""
        key = hdr.get('net')
        if not isinstance(key, str) or not key:
            return None, self.new_netns()
        entry = self.netns.get(key)
        if entry is None:
            if len(self.netns) >= _NETNS_MAX:
                self.close_oldest_idle_netns()
            entry = self.netns[key] = [self.new_netns(), 0.0]
        entry[1] = time.monotonic()
        return key, entry[0]

    def new_netns(self):
        """Make a network namespace with its loopback up and return a
        descriptor on it. The zygote makes it in itself (unshare, then back
        to its own with setns), which costs no fork."""
        _libc_call('unshare', _CLONE_NEWNET)
        try:
            _loopback_up()
            return os.open('/proc/self/ns/net', os.O_RDONLY | os.O_CLOEXEC)
        finally:
            # Back home whatever happened: the next spares, and the next
            # session's namespace, must not start from this one.
            _libc_call('setns', self.nethome, _CLONE_NEWNET)

    def shutdown(self):
        for pid, job in list(self.jobs.items()):
            _kill_job(pid, job.init)
        for pid, _, init in self.spares:
            _kill_job(pid, init)
        os._exit(0)

    def receive(self):
        """Read and act on one message of the worker's. A run request is
        its header, a newline, then the job's own part, which is handed to
        the job's process as it came: the zygote decodes the header only,
        and wipes the request from its buffer once handed on, so that no
        session's request (its directories, uid, environment) is in the
        memory of the processes it forks next, for other sessions."""
        n, anc, flags, _ = self.ctl.recvmsg_into([_BUF], _ANC_SPACE)
        fds = []
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                k = len(data) - len(data) % 4
                fds.extend(memoryview(data)[:k].cast('i'))
        if not n and not fds:
            return False  # end of file: the worker is gone
        try:
            cut = _BUF.find(b'\n', 0, n)
            head = bytes(_BUF[:n if cut < 0 else cut])
            try:
                hdr = json.loads(head)
            except ValueError:
                hdr = None
            if not isinstance(hdr, dict):
                hdr = {}  # not a message: ignored
            op = hdr.get('op')
            if op == 'run':
                jid = hdr.get('id')
                if type(jid) is not int:
                    jid = None  # no job of the worker's: the answer names none
                clones = hdr.get('clones', 0)
                if type(clones) is not int or not 0 <= clones <= _MAX_CLONES or clones and self.sandbox is None:
                    clones = None  # mount clones are a sandboxed job's, and counted
                if jid is None or clones is None or cut < 0 or flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 3 + clones:
                    _send(self.ctl, {'op': 'failed', 'id': jid, 'error': 'malformed run request'})
                else:
                    self.learn_cgroup_dirs(hdr)
                    self.last_run = head
                    with memoryview(_BUF) as view:
                        self.run(jid, view[cut + 1:n], fds, hdr)
            elif op == 'kill':
                self.kill(hdr.get('id'))
        finally:
            for fd in fds:
                os.close(fd)
            _BUF[:n] = bytes(n)
        return True

    def fork_spare(self):
        """Fork a child that prepares itself and waits for a job; return
        (pid, socket) or None when fork fails."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        _flush_std()
        gc.freeze()
        init = None
        try:
            if self.pidns is None:
                pid = os.fork()
            elif self.init_fd is None:
                pid = self.fork_in_pid_namespace()
            else:
                pid, init = self.fork_under_init()
        except OSError as e:
            os.write(2, ('codexec: zygote: no spare: %s\n' % e).encode())
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            ours.detach()
            _spare_main(self, theirs)  # never returns
        theirs.close()
        return pid, ours, init

    def fork_under_init(self):
        """Make a PID namespace whose init (pid 1) is the small init
        (_spawn_init), and fork the spare into it as pid 2: one fork of
        the interpreter per job. The spare stays the zygote's child, so its
        wait status, which is the job's, comes to the zygote from the
        kernel; killing the init ends the namespace and everything in it.
        Returns (pid, init) in the zygote, (0, None) in the spare."""
        _libc_call('unshare', _CLONE_NEWPID)
        init = None
        try:
            init = _spawn_init(self.init_fd)
            pid = os.fork()
        except OSError:
            if init is not None:
                _kill_job(init, None)
            _libc_call('setns', self.pidns, _CLONE_NEWPID)
            raise
        if pid != 0:
            _libc_call('setns', self.pidns, _CLONE_NEWPID)
        return pid, init

    def fork_in_pid_namespace(self):
        """Fork a child that is the init (PID 1) of a new PID namespace.
        unshare(CLONE_NEWPID) only says where the next children go, and
        only once: the zygote goes back to its own namespace right after
        the fork, so that the next spare gets a namespace of its own too."""
        _libc_call('unshare', _CLONE_NEWPID)
        try:
            pid = os.fork()
        except OSError:
            _libc_call('setns', self.pidns, _CLONE_NEWPID)
            raise
        if pid != 0:
            _libc_call('setns', self.pidns, _CLONE_NEWPID)
        return pid

    def learn_cgroup_dirs(self, hdr):
        """Remember the cgroup directories the worker's jobs take out of
        their view (the header's unmount, the same for every job of a worker),
        and take them out of the zygote's own, keeping a descriptor on
        each (_hide_cgroup_dirs): the spares forked from now on start
        without them and join their cgroups through the descriptors. Once
        here rather than in each spare: each unmount waits for an
        expedited RCU grace period (an interrupt on every CPU), three or
        four per job. The zygote's mount namespace is the sandbox's own
        (its launcher always makes one); a directory it cannot unmount
        the spares take out themselves, as before."""
        dirs = hdr.get('unmount')
        if self.sandbox is None:
            return
        if isinstance(dirs, list) and all(isinstance(d, str) and d.startswith('/') for d in dirs):
            if dirs != self.cgroup_dirs:
                hidden = len(_cgroup_dirs)
                _hide_cgroup_dirs(dirs)
                if len(_cgroup_dirs) != hidden:
                    # The unmounts reached the spares made before (their
                    # mounts follow the zygote's), which hold no descriptor
                    # on those directories: they could not join their
                    # cgroups. Fresh ones take their place.
                    for pid, sock, init in self.spares:
                        sock.close()
                        _kill_job(pid, init)
                    self.spares = []
            self.cgroup_dirs = dirs

    def run(self, jid, msg, fds, hdr):
        net = netfd = None
        if self.nethome is not None:
            try:
                net, netfd = self.session_netns(hdr)
            except OSError as e:
                _send(self.ctl, {'op': 'failed', 'id': jid, 'error': 'network namespace: %s' % e})
                return
            fds = list(fds[:3]) + [netfd] + list(fds[3:])
        try:
            self.hand_over(jid, msg, fds, net, hdr.get('context') is True)
        finally:
            if net is None and netfd is not None:
                os.close(netfd)  # the job's own: the job holds it now

    def hand_over(self, jid, msg, fds, net, context=False):
        for _ in range(2):
            spare = self.spares.pop(0) if self.spares else self.fork_spare()
            if spare is None:
                _send(self.ctl, {'op': 'failed', 'id': jid, 'error': 'fork failed'})
                return
            pid, sock, init = spare
            # "started" goes first: once the job is handed over it may run
            # (and even kill this zygote) at once, and the worker must never
            # take a job that started for one that did not.
            self.ctl.send(_started(jid, pid))
            try:
                sock.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('%di' % len(fds), *fds))])
                break
            except OSError:
                # The spare died waiting (its reaping is SIGCHLD's business):
                # fork another one.
                sock.close()
                _kill_job(pid, init)
        else:
            _send(self.ctl, {'op': 'failed', 'id': jid, 'error': 'no process to run the job'})
            return
        if init is not None:
            # The job's wait status comes from the kernel (reap), not on
            # this socket: the job's process reads its job, then closes its
            # end before any job code runs.
            sock.close()
            self.jobs[pid] = _Job(jid, None, net, context, init)
            return
        sock.setblocking(False)
        self.jobs[pid] = _Job(jid, sock, net, context)
        self.by_fd[sock.fileno()] = pid
        self.poller.register(sock.fileno(), select.POLLIN)

    def kill(self, jid):
        for pid, job in self.jobs.items():
            if job.id == jid and not job.done:
                _kill_job(pid, job.init)

    def finish(self, pid, job, status):
        """Tell the worker how the job ended, then kill what it left
        behind. In that order: the kill ends the keeper too, whose teardown
        of the job's address space (a millisecond of CPU) then runs beside
        the result's way back instead of before it. pid must not be reaped
        yet, so that it still names the job's group."""
        job.done = True
        self.ctl.send(_exited(job.id, status))
        _kill_job(pid, job.init)

    def close_report(self, job):
        if job.sock is not None:
            fd = job.sock.fileno()
            self.poller.unregister(fd)
            self.by_fd.pop(fd, None)
            job.sock.close()
            job.sock = None

    def report(self, fd):
        """In a sandbox, the job's namespace init (A in _fork_job_process)
        reported the job's process's wait status; or every holder of the
        job's socket closed it (unsandboxed, the job's process does before
        the job runs: its wait status comes from reap)."""
        job = self.jobs.get(self.by_fd.get(fd))
        if job is None or job.sock is None:
            return  # an event of a socket closed since the poll
        pid = self.by_fd[fd]
        try:
            data = job.sock.recv(64)
        except BlockingIOError:
            return  # not for this socket: its descriptor was reused since the poll
        except OSError:
            data = b''
        if data:
            try:
                status = int(data)
            except ValueError:
                status = None  # never sent: the process's wait status will tell
            if status is not None and 0 <= status <= 0xFFFF and not job.done:
                self.finish(pid, job, status)
        self.close_report(job)

    def reap(self):
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid == 0:
                return
            pid = info.si_pid
            job = self.jobs.get(pid)
            if job is not None and not job.done and job.sock is not None:
                # A sandboxed spare reports before it exits: its report may
                # still wait in the socket.
                self.report(job.sock.fileno())
            if job is not None and not job.done:
                # It died without reporting (a signal, os._exit, a crash),
                # or, under a small init, it is the job's process and the
                # kernel reports for it. Not reaped yet, its pid still
                # names its group: finish (which kills the group) first,
                # then reap.
                self.finish(pid, job, _wait_status(info))
            self.wait(pid)
            if job is not None:
                self.close_report(job)
                del self.jobs[pid]
            else:
                for spare in self.spares:
                    if spare[0] == pid:
                        spare[1].close()
                        _kill_job(pid, spare[2])
                        self.spares.remove(spare)
                        break

    def wait(self, pid):
        try:
            return os.waitpid(pid, 0)
        except ChildProcessError:
            return pid, 0


# ---------------------------------------------------------------------------
# The child: from here on the process is the job's, never the zygote's. It
# must never return into the zygote's code.


def _spare_main(z, sock):
    code = 126
    received = done = False
    try:
        job_sock = _prepare_child(z, sock)
        msg, fds = _receive_job(job_sock, 3 if z.nethome is None else 4)
        net = z.nethome is not None
        received = True
        # The job never holds the socket: in a sandbox, this process's
        # namespace init reports on it how the process ended, and the job
        # could write a status of its own choosing there.
        job_sock.close()
        req = json.loads(msg)
        _setup_job(req, fds, net)
        _run_site_code()
        if _richout is not None:
            _richout.job_start()
        code, interrupted = _run_main(req['script'])
        done = True
        if interrupted:
            # Like CPython: an uncaught KeyboardInterrupt ends the process by
            # SIGINT, so its parent sees the signal.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            _close_std()
            _keep_address_space()
            os.kill(os.getpid(), signal.SIGINT)
    except _NoJob:
        os._exit(0)
    except BaseException as e:
        try:
            os.write(2, ('codexec: the job could not start: %s: %s\n' % (type(e).__name__, e)).encode())
        except BaseException:
            pass
    finally:
        if received:
            # Output is flushed; closing it now lets the worker see the end
            # of it without waiting for this process's teardown.
            _close_std()
        if done:
            _keep_address_space()
        os._exit(code)


def _close_std():
    for fd in (0, 1, 2):
        try:
            os.close(fd)
        except OSError:
            pass


class _NoJob(Exception):
    pass


def _prepare_child(z, sock):
    """The steps that make a forked zygote a job's process and do not
    depend on the job; a spare does them while it waits. Returns the socket
    the job comes on (in a sandbox, the namespace's init keeps it to report
    the job's end; the job's process closes it before any job code runs)."""
    # A session and process group of its own: the worker kills the whole
    # group on timeout, and signals aimed at it never reach the zygote.
    os.setsid()
    # Die with the zygote, like a spawned job dies with its worker. (When
    # this process is the init of its PID namespace (fork_in_pid_namespace)
    # its parent has no pid there: getppid() is 0. The zygote is the
    # sandbox's PID 1, whose death kills every process of the sandbox.)
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != (z.pid if z.pidns is None else 0):
            os._exit(126)
    # The zygote made this process's PID namespace: it is the namespace's
    # init, or under a small one (z.init_fd) its pid 2, the job's process.
    init = z.pidns is not None
    # Signals as the interpreter had them before the zygote took SIGCHLD.
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, z.sigchld)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    # Nothing of the zygote's stays open, above all not its control socket.
    # The job's socket moves out of the way of the descriptors opened below.
    z.ctl.detach()
    z.pidns = None
    for _, other, _ in z.spares:
        other.detach()
    for job in z.jobs.values():
        if job.sock is not None:
            job.sock.detach()
    high = 1023
    if resource is not None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if 0 < soft <= high:
            high = soft - 1
    report = socket.socket(fileno=os.dup2(sock.fileno(), high, inheritable=False))
    sock.detach()
    # The descriptors on the cgroup directories the zygote took out of
    # view stay, until the job has joined its cgroups (_close_hidden).
    _close_fds(keep={high, *_cgroup_dirs.values()})
    if z.sandbox is not None:
        # A spare makes a network namespace of its own only where the
        # zygote cannot make one per session (session_netns).
        _enter_namespaces(z.sandbox, z.cgroup_dirs, z.sandbox.get('netns') and z.nethome is None)
        if init and z.init_fd is not None:
            # pid 2 under a small init (fork_under_init): this process is
            # the job's, and the kernel tells the zygote how it ended.
            _own_proc()
        else:
            if not init:
                _enter_pid_namespace(report)  # returns in the namespace's init only
            _fork_job_process(report)  # returns in the job's process only
    gc.enable()
    if not _job_waiting(report):
        _rehearse_job(_REHEARSAL)
    _forget_other_jobs(z)
    return report


def _job_waiting(sock):
    """Whether the job is already there for this process: it was forked
    for a job that found no spare (the zygote is busy, as under load).
    Rehearsing then would only put its cost (0.7 ms of CPU here, about
    what it saves) on the job's path."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _forget_other_jobs(z):
    """Drop what the zygote knew of other jobs, which this process got
    with its copy of the zygote's memory and its job could read there: the
    last run request's header, the (opaque) keys of the network namespaces
    open, the jobs running, and whatever of a request is left in _BUF
    (the zygote wipes each; none holds a NUL: the longest ends at the first)."""
    z.last_run = None
    z.netns.clear()
    z.jobs.clear()
    n = _BUF.find(0)
    if n < 0:
        n = len(_BUF)
    _BUF[:n] = bytes(n)


def _rehearse_job(msg):
    """Copy ahead, while the spare waits, pages that the job's own steps
    write (as the zygote's rehearse does for its part): the spare shares
    every page with the zygote, copy-on-write, and a forked interpreter's
    first writes to a page (reference counts, the allocator's pools) copy
    it, a few hundred of them on the way from the request to the job's
    first line and after its last. Goes through the last request the zygote
    had, side-effect free: decoded, its environment and script path read,
    a module like the job's made, a statement compiled and run in it, the
    standard streams flushed (they hold nothing yet)."""
    if msg is None:
        return
    try:
        req = json.loads(msg)
        env = {}
        for kv in req.get('env') or ():
            name, sep, value = kv.partition('=')
            if name and sep:
                env[name] = value
        for name in os.environ:
            env.get(name) == os.environ.get(name)
        path = req.get('script')
        if not isinstance(path, str):
            return
        os.path.dirname(os.path.realpath(path))
        d = type(sys)('__main__').__dict__
        for name in _MAIN_NAMES:
            d.get(name)
        exec(compile(b'pass\n', path, 'exec', dont_inherit=True), d)
        d.clear()
        sys.modules.get('numpy.random')
        sys.modules.get('threading')
        _flush_std()
    except Exception:
        pass


def _receive_job(sock, nfds):
    n, anc, _, _ = sock.recvmsg_into([_BUF], _ANC_SPACE)
    msg = bytes(_BUF[:n])
    fds = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(data) - len(data) % 4
            fds.extend(memoryview(data)[:n].cast('i'))
    if not msg or len(fds) < nfds:
        raise _NoJob()  # the zygote closed the socket: it is going away
    return msg, fds


def _setup_job(req, fds, net):
    """The job's own steps, before any of its code runs. fds: stdin,
    stdout, stderr, the session's network namespace when the zygote keeps
    one per session (net), then the mount clones of the job's binds, when
    the worker sends them (_attach_clones)."""
    std, clones = fds[:3], fds[3:]
    if net:
        # Still root: join the session's network namespace, whose only
        # device is its loopback. Failing that the job must not run (this
        # process is in the zygote's network namespace until now).
        netfd = clones.pop(0)
        _libc_call('setns', netfd, _CLONE_NEWNET)
        os.close(netfd)
    # stdin, stdout and stderr on 0, 1 and 2: sys.stdin, sys.stdout and
    # sys.stderr already wrap those descriptors.
    for i, fd in enumerate(std):
        os.dup2(fd, i)
    for fd in std:
        if fd > 2:
            os.close(fd)
    confine = req.get('confine')
    if confine is None:
        if clones:
            raise OSError('mount clones for a job with no confinement')
        os.chdir(req['dir'])
    else:
        _confine(confine, clones)
        _close_hidden()
    # The job holds 0, 1 and 2 and nothing else: no descriptor of its
    # set-up (the hidden roots, the socket its job came on) nor any other.
    _close_fds()
    env = {}
    for kv in req.get('env') or ():
        name, sep, value = kv.partition('=')
        if name and sep:
            env[name] = value
    tz = os.environ.get('TZ')
    for name in [n for n in os.environ if n not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    if hasattr(time, 'tzset') and env.get('TZ') != tz:
        time.tzset()
    for res, soft, hard in req.get('rlimits') or ():
        resource.setrlimit(res, (soft, hard))
    if confine is not None:
        _drop_privileges(confine)
        os.chdir(req['dir'])  # the session's uid may enter it; root may not
    if _seccomp is not None:
        _install_seccomp()  # last: every step above needs calls it refuses


# ---------------------------------------------------------------------------
# Confinement of a sandboxed zygote's children. The zygote runs as root with
# a few capabilities (CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID, CAP_KILL,
# CAP_NET_ADMIN) in a bubblewrap sandbox that shows the interpreter, the
# environment, every session's directory and the job cgroups. Each child
# makes itself a view of its own session only, then becomes that session's
# uid, which takes every capability away:
#
#   spare (before the job is known, off the job's path): new PID, mount and
#     IPC namespaces; a fresh /tmp and /dev/shm; the session directories
#     of everyone taken out of its view (where the worker sends mount
#     clones) or hidden under an empty tmpfs (where it does not).
#   job: unless the pool allows egress, the network namespace of its
#     session (a loopback only, made by the zygote on the session's first
#     job, shared by the session's jobs, never by two sessions: where the
#     zygote cannot make one per session, each spare makes its own); its
#     own session directories attached from the mount clones its request
#     brought, or bound back from the hidden roots, which are then taken
#     out of its view (working directory read-write, scripts read-only);
#     the job's cgroups joined and their directories unmounted;
#     rlimits; then setgroups([]), setresgid, setresuid to the session's
#     uid and no_new_privs, so that no setuid program can give privileges
#     back.


def _b(s):
    return s.encode() if isinstance(s, str) else s


def _libc_call(name, *args):
    if _libc is None:
        raise OSError('ctypes is not available: the sandbox cannot be set up')
    if getattr(_libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, '%s %s: %s' % (name, args[:2], os.strerror(e)))


def _mount(source, target, fstype, flags, data):
    _libc_call('mount', _b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))


_hidden = []  # (root, O_PATH descriptor) of each hidden root, in a child


def _enter_namespaces(sandbox, cgroup_dirs, netns):
    _libc_call('unshare', _CLONE_NEWNS | _CLONE_NEWIPC | (_CLONE_NEWNET if netns else 0))
    # Slave, not private: mounts the worker makes later (a session's own
    # file system, mounted at its first call) still reach this child, and
    # nothing it mounts reaches back.
    _mount(None, '/', None, _MS_REC | _MS_SLAVE, None)
    global _clone_mode
    _clone_mode = bool(sandbox.get('clones'))
    for root in sandbox.get('hidden') or ():
        if _clone_mode:
            # The job's directories come with its request, as mount clones
            # (_attach_clones); the zygote took every session's out of its
            # view (and so of this copy of it) when it started. _hide_roots
            # covers what is left at each root's path.
            _roots.append(root)
        else:
            # The roots of every session's directories: kept open, so that
            # the job's own can be bound back from them once they are
            # hidden (by the fresh /tmp below, when they lie under /tmp,
            # or by _confine).
            _hidden.append((root, os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)))
    # What the sandbox shows under /tmp (an environment, when the worker's
    # data lives there) must survive the fresh /tmp: bound back below.
    keep = [(path, write, os.open(path, os.O_PATH | os.O_CLOEXEC)) for path, write in sandbox.get('keep') or ()]
    for d in ('/tmp', '/dev/shm'):
        if os.path.isdir(d):
            _mount('tmpfs', d, 'tmpfs', _MS_NOSUID | _MS_NODEV, 'mode=1777')
    for path, write, fd in keep:
        _bind_fd(fd, path, write)
        os.close(fd)
    _hide_roots()
    _hide_cgroup_dirs(cgroup_dirs)
    if netns:
        _loopback_up()
    _own_dev()
    _own_session_keyring()


# Terminals a job may hold at once: its devpts instance's bound (max=).
_PTY_MAX = 16


def _own_dev():
    """Give the child a devpts instance of its own, and /dev read-only.
    bubblewrap's --dev made one devpts instance for the whole zygote: every
    job saw the others' terminals in /dev/pts and took from one pool, so
    that one job could take every pty the kernel lends (kernel.pty.max)
    from the others and the host. And without root /dev (a tmpfs that
    bubblewrap made, shared by every child's mount namespace) belongs to
    the jobs' uid: a job could plant a file, or a link over /dev/null, that
    other jobs would use."""
    if os.path.isdir('/dev/pts'):
        _mount('devpts', '/dev/pts', 'devpts', _MS_NOSUID | _MS_NOEXEC,
               'newinstance,ptmxmode=0666,mode=620,max=%d' % _PTY_MAX)
        # bubblewrap's /dev/ptmx is a link to pts/ptmx, which now names the
        # new instance; a device node (a /dev bound from the host) would
        # open the host's: put the instance's over it.
        if os.path.exists('/dev/ptmx') and not os.path.islink('/dev/ptmx'):
            _mount('/dev/pts/ptmx', '/dev/ptmx', None, _MS_BIND, None)
    # This mount only (the devices bound under it stay writable devices).
    _mount(None, '/dev', None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)


# keyctl(2)'s number, by machine (libc has no wrapper; libkeyutils does).
_KEYCTL_NR = {
    'x86_64': 250, 'aarch64': 219, 'riscv64': 219, 'loongarch64': 219,
    'ppc64le': 280, 'ppc64': 280, 's390x': 280, 'i686': 288, 'i386': 288, 'armv7l': 311,
}
_KEYCTL_JOIN_SESSION_KEYRING = 1


def _own_session_keyring():
    """Join a new, empty session keyring (the job's processes inherit it).
    The one inherited from the zygote is the worker's (systemd gives a
    service one, a login session has one), possessed by every job, so a key
    that one job added to it (add_key(..., KEY_SPEC_SESSION_KEYRING)) any
    other could read. This one goes away with the job. Each session's user
    keyring is its uid's, apart as the uids are (without root all jobs share
    one uid, hence one user keyring: only a system-call filter keeps jobs
    from it)."""
    machine = os.uname().machine
    nr = _KEYCTL_NR.get(machine)
    if nr is None:
        raise OSError('keyctl: no system call number known for %s' % machine)
    if _libc.syscall(ctypes.c_long(nr), ctypes.c_long(_KEYCTL_JOIN_SESSION_KEYRING), None) < 0:
        e = ctypes.get_errno()
        # No keyrings in the kernel, or keyctl refused to the zygote (a
        # container's filter): then jobs cannot use keyrings either.
        if e not in (1, 38):  # EPERM, ENOSYS
            raise OSError(e, 'keyctl(KEYCTL_JOIN_SESSION_KEYRING): %s' % os.strerror(e))


def _loopback_up():
    """A new network namespace has its loopback down: bring it up, as
    bubblewrap does for its own."""
    import fcntl

    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, struct.pack('16sH14x', b'lo', 0))
        flags = struct.unpack('16sH14x', ifr)[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack('16sH14x', b'lo', flags | IFF_UP))
    finally:
        s.close()


def _bind_fd(fd, path, write):
    """Bind what the O_PATH descriptor fd names at path (made if missing:
    directories passable by all, as the sandbox's own)."""
    if not os.path.lexists(path):
        os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
        if os.path.isdir('/proc/self/fd/%d' % fd):
            os.mkdir(path, 0o755)
        else:
            open(path, 'a').close()
    _mount('/proc/self/fd/%d' % fd, path, None, _MS_BIND, None)
    _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV | (0 if write else _MS_RDONLY), None)


def _hide_roots():
    """Put an empty tmpfs over every session's directories: the job's own
    are bound back from the hidden roots' descriptors, or attached from
    the mount clones of its request (_confine)."""
    for root in _roots or [root for root, _ in _hidden]:
        if os.path.isdir(root):  # not already gone under the fresh /tmp
            _mount('tmpfs', root, 'tmpfs', _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, 'mode=0711,size=64k')


_roots = []  # the hidden roots, in a child that takes them out of view ahead of its job (_clone_mode)
_clone_mode = False  # the job's binds come as mount clones (zygoteSandboxCfg.Clones)
_cgroup_dirs = {}  # path -> O_PATH descriptor of each cgroup directory taken out of view (zygote, then each child)


def _hide_cgroup_dirs(dirs):
    """Take the job cgroups' directories out of the view, ahead of the
    job, keeping a descriptor on each: the job joins its cgroups through
    them (_join_cgroups) and sees none. A directory the zygote took out
    already (learn_cgroup_dirs) is skipped: its descriptor came with the
    fork."""
    for d in dirs:
        if d in _cgroup_dirs:
            continue
        try:
            fd = os.open(d, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # the job's request will say; _confine unmounts what is left
        try:
            _libc_call('umount2', _b(d), _MNT_DETACH)
        except OSError:
            os.close(fd)
            continue
        _cgroup_dirs[d] = fd


def _join_cgroups(c):
    """Join the job's cgroups (cgroup.procs files), then take the cgroup
    directories out of the job's view, unless the spare already did.

    Writing a process to cgroup.procs moves all its threads, under a lock
    (cgroup_threadgroup_rwsem) whose writer waits for an RCU grace period:
    5 to 15 ms on a busy 2-core machine, the largest part of a sandboxed
    job's set-up. This process has one thread (the zygote has no other,
    and a fork copies only the caller), so on cgroup v1 it joins through
    the cgroup's tasks file instead, which moves the calling thread alone
    and needs no such lock (Linux 6.1 and later; earlier kernels take it
    either way). cgroup v2 has no tasks file: cgroup.procs it is."""
    single = _one_thread()
    for f in c.get('cgroups') or ():
        fd = None
        if single and os.path.basename(f) == 'cgroup.procs':
            fd = _open_cgroup_file(os.path.join(os.path.dirname(f), 'tasks'), missing_ok=True)
        if fd is None:
            fd = _open_cgroup_file(f)
        try:
            os.write(fd, b'0')
        finally:
            os.close(fd)
    for d in c.get('unmount') or ():
        if d not in _cgroup_dirs:
            _libc_call('umount2', _b(d), _MNT_DETACH)


def _one_thread():
    try:
        return len(os.listdir('/proc/self/task')) == 1
    except OSError:
        return False


def _open_cgroup_file(f, missing_ok=False):
    """Open f for writing: through the descriptor of the cgroup directory
    it lies under when the spare took that directory out of view, by its
    path otherwise. None when missing_ok and there is no such file."""
    try:
        for d, dfd in _cgroup_dirs.items():
            if f.startswith(d + '/'):
                rel = f[len(d) + 1:]
                if not rel or rel.startswith('/') or '..' in rel.split('/'):
                    raise OSError('bad cgroup file %r' % f)
                return os.open(rel, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
        return os.open(f, os.O_WRONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise


def _confine(c, clones):
    """The job's view of the file system and its cgroups (still root).
    clones: the mount clones of the job's binds, in their order, where the
    worker sends them (_clone_mode)."""
    binds = c.get('binds') or ()
    if _clone_mode:
        _attach_clones(binds, clones)
    elif clones:
        raise OSError('mount clones for a child that binds its directories itself')
    else:
        _bind_from_hidden_roots(binds)
        _detach_hidden_roots()
    _join_cgroups(c)
    size = c.get('tmp_size')
    if size:
        for d in ('/tmp', '/dev/shm'):
            if os.path.isdir(d):
                _mount(None, d, None, _MS_REMOUNT | _MS_NOSUID | _MS_NODEV, 'mode=1777,size=%d' % size)


def _bind_from_hidden_roots(binds):
    """Bind each of the job's directories back from the hidden root it
    lies under (the descriptors _enter_namespaces kept)."""
    for path, write in binds:
        for root, fd in _hidden:
            if path.startswith(root + '/'):
                rel = path[len(root) + 1:]
                break
        else:
            raise OSError('%s is not under a hidden root' % path)
        if not rel or rel.startswith('/') or '..' in rel.split('/'):
            raise OSError('bad bind %r' % path)
        # The source is resolved from the hidden root's descriptor, and a
        # link planted by a job on the way is not followed.
        src = os.open(rel, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        try:
            _bind_fd(src, path, write)
        finally:
            os.close(src)


def _attach_clones(binds, clones):
    """Attach each bind's mount clone at its path: a copy of the mount of
    the session's directory, made by the worker (open_tree(2),
    OPEN_TREE_CLONE) with its flags set (nosuid, nodev, and read-only
    unless the bind writes), attached in this mount namespace
    (move_mount(2)). Nothing of any session is in this child's view
    before: no root to take out after."""
    if len(clones) != len(binds):
        raise OSError('%d mount clones for %d binds' % (len(clones), len(binds)))
    for (path, _), fd in zip(binds, clones):
        root = next((r for r in _roots if path.startswith(r + '/')), None)
        if root is None:
            raise OSError('%s is not under a hidden root' % path)
        if '..' in path.split('/'):
            raise OSError('bad bind %r' % path)
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError('%s is not a directory' % path)
        # The way to it, in the empty tmpfs over its root (_hide_roots):
        # one mkdir a level (os.makedirs looked at each level first, and
        # its Python took about 0.04 ms a bind). A root that is gone (under
        # the fresh /tmp) is made too.
        d = root
        try:
            for part in path[len(root) + 1:].split('/'):
                d += '/' + part
                try:
                    os.mkdir(d, 0o755)
                except FileExistsError:
                    pass
        except FileNotFoundError:
            os.makedirs(path, 0o755, exist_ok=True)
        _libc_call('syscall', ctypes.c_long(_SYS_MOVE_MOUNT), fd, b'', _AT_FDCWD, _b(path), _MOVE_MOUNT_F_EMPTY_PATH)
        os.close(fd)


def _detach(path):
    """Take the mount at path, and all under it, out of this mount
    namespace; nothing when path is no mount of its own."""
    try:
        _libc_call('umount2', _b(path), _MNT_DETACH)
    except OSError as e:
        if e.errno != errno.EINVAL:
            raise


def _detach_hidden_roots():
    """Take the hidden roots out of the job's mount namespace, once its own
    directories are bound from them. A session's file system is mounted
    under the sessions root, which this namespace follows as a slave (so
    that a session mounted after the spare was made is there for its job):
    every session's mount reaches every spare, under the hidden root, and
    its path, naming the session, would be in the job's mount table. Taking
    each root away (lazily, with all mounted under it) removes them all;
    the job's own binds are mounts of their own and stay. A root that is
    not a mount of its own has no session mounted under it: nothing to do."""
    while _hidden:
        _, fd = _hidden.pop()
        try:
            _detach('/proc/self/fd/%d' % fd)
        finally:
            os.close(fd)


def _drop_privileges(c):
    uid, gid = c['uid'], c['gid']
    ppid = os.getppid()
    if os.getuid() != uid:
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    # (Rootless, the job keeps the zygote's uid; emptying the capability
    # sets below takes the user namespace's capabilities away.)
    # Changing uid cleared the parent-death signal and made the process
    # undumpable (its /proc files root's): set both back.
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != ppid:
        os._exit(126)
    _prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    # setresuid emptied the effective and permitted sets; the inheritable
    # one still holds the zygote's: empty it too (capset, version 3).
    _libc_call('capset', _CAP_HEADER, _CAP_EMPTY)
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), 'no_new_privs')
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError('the privilege drop did not take')


_seccomp = None  # (struct sock_fprog, its instructions): every job's filter


def _prepare_seccomp(b64):
    """Decode the jobs' system-call filter (worker/seccomp) once, in the
    zygote, so that installing it costs each job one prctl."""
    global _seccomp
    import binascii

    prog = binascii.a2b_base64(b64)
    if _libc is None:
        raise OSError('ctypes is not available: the system-call filter cannot be installed')
    if not prog or len(prog) % 8 or len(prog) // 8 > 4096:
        raise ValueError('malformed seccomp program of %d bytes' % len(prog))

    class SockFprog(ctypes.Structure):
        _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]

    buf = ctypes.create_string_buffer(prog, len(prog))
    _seccomp = (SockFprog(len(prog) // 8, ctypes.addressof(buf)), buf)


def _install_seccomp():
    """Put the job's process, and all it starts, under the filter: calls it
    refuses fail with EPERM. no_new_privs, which an unprivileged process
    needs for this, is set (_drop_privileges); the process has one thread."""
    if _prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(_seccomp[0]), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, 'seccomp filter: %s' % os.strerror(e))


def _fork_job_process(report):
    """Fork the job's process from this spare, the init of the job's PID
    namespace (fork_in_pid_namespace), and make this process its reaper.
    (Where the zygote has its small init, fork_under_init does without
    this second fork of the interpreter.)

    The spare (A) is the namespace's PID 1, the zygote's handle on it: it
    forks the job's process (B, pid 2) and reaps what is orphaned there.
    Everything the job starts lives in that namespace, and nothing can leave
    it: when A dies the kernel kills every process in it. A dies with the
    zygote (its parent-death signal), and the zygote ends a job, and
    everything it started, by killing A (rootless, A dies with the spare
    above it, S, which the zygote kills: _enter_pid_namespace). B gets its own /proc, which shows
    only the namespace's processes.

    The job's exit status reaches the zygote from A, which runs no job
    code: B's wait status, on the socket the job came on, as soon as A has
    reaped B (before A and the namespace are torn down). B closes its copy
    of the socket before the job runs, so a job cannot report an outcome of
    its own choosing. Returns in B only."""
    try:
        b = os.fork()
        if b != 0:  # A, PID 1
            _guard_init()
            while True:
                pid, st = os.wait()
                if pid == b:
                    try:
                        report.send(b'%d' % st)
                    except OSError:
                        pass  # the zygote gave up on the job
                    # As init, A cannot end by a signal of its own: its wait
                    # status is the zygote's fallback only, when A could not
                    # report (it was killed).
                    os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st))
    except BaseException:
        os._exit(125)
    # B: the job's process.
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != 1:
        os._exit(126)
    os.setsid()  # as before: the job leads a session of its own
    _own_proc()


def _own_proc():
    """A /proc of the job's PID namespace. hidepid: its init runs as root
    (but without root, as the job's uid). The host's block devices' counters
    are covered (_MASKED_PROC)."""
    _mount('proc', '/proc', 'proc', _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, 'hidepid=2')
    try:
        for path in _MASKED_PROC:
            _mount('/dev/null', path, None, _MS_BIND, None)
            _mount(None, path, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NOEXEC, None)
        for path in _MASKED_PROC_DIRS:
            if os.path.isdir(path):
                _mount('tmpfs', path, 'tmpfs', _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, 'mode=0555,size=4k')
    except OSError:
        # A rootless sandbox's job holds a user namespace of its own, in
        # which it could undo these mounts anyway; as root they must hold.
        if not _ROOTLESS:
            raise


# Files of /proc that tell of the whole host's block devices, covered with
# /dev/null: every session's file system is a loop device of its own, and
# /proc/diskstats gave each one's reads and writes as they happened, so one
# session watched another's disk activity; /proc/partitions listed them.
# As sandbox.MaskedProc (the worker's launchers do the same).
_MASKED_PROC = ('/proc/diskstats', '/proc/partitions')
# Directories of /proc covered with an empty, read-only tmpfs: /proc/fs has
# one per mounted ext4 file system (every session's included), whose
# mb_groups gave its free blocks, what another session's files take. As
# sandbox.MaskedProcDirs.
_MASKED_PROC_DIRS = ('/proc/fs',)
_ROOTLESS = False  # the zygote's sandbox is rootless (set by _main)


def _enter_pid_namespace(report):
    """Where the zygote cannot make each spare a PID namespace's init
    (rootless): this spare (S) makes the namespace and forks its init (A),
    which dies with S (its parent-death signal): the zygote ends a job by
    killing S. S passes on A's exit status, the zygote's fallback when A
    could not report. Returns in A only."""
    _libc_call('unshare', _CLONE_NEWPID)
    a = os.fork()
    if a != 0:  # S
        try:
            report.close()
            _close_hidden()
            _, st = os.waitpid(a, 0)
            os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st))
        except BaseException:
            os._exit(125)
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)


def _guard_init():
    """Keep the job away from A, its namespace's init, which holds the
    socket that reports the job's end. As init, A gets from the job only
    the signals it handles: it handles none. Not dumpable, it cannot be
    ptraced, nor its descriptors taken (pidfd_getfd), by a job of its own
    uid (without root). And it holds no descriptor it does not need."""
    _close_hidden()
    for sig in signal.valid_signals():
        if sig != signal.SIGCHLD and callable(signal.getsignal(sig)):
            signal.signal(sig, signal.SIG_IGN)
    if _prctl is not None:
        _prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _close_hidden():
    """Close the O_PATH descriptors on the hidden roots (_enter_namespaces)
    and the cgroup directories (_hide_cgroup_dirs): with one, a process
    could reach every session's directories, or every job's cgroup."""
    while _hidden:
        os.close(_hidden.pop()[1])
    while _cgroup_dirs:
        os.close(_cgroup_dirs.popitem()[1])


_SYS_CLOSE_RANGE = 436  # the same number on every architecture
_close_range_works = [_libc is not None]


def _close_fds(keep=()):
    """Close every descriptor above 2 but those of keep: with
    close_range(2) over the gaps between them (Linux 5.9), one call each,
    where the kernel has it; else each descriptor /proc/self/fd lists,
    which took a job's process about 0.07 ms a time (the listing, and the
    first writes to the pages its Python touches). os.closerange is no
    substitute: an interpreter built without close_range (older C
    libraries) closes every number in the range one call at a time."""
    if _close_range_works[0]:
        lo = 3
        try:
            for hi in sorted(fd for fd in keep if fd >= lo) + [0x100000000]:
                if hi > lo and _libc.syscall(ctypes.c_long(_SYS_CLOSE_RANGE), ctypes.c_long(lo),
                                             ctypes.c_long(hi - 1), ctypes.c_long(0)) != 0:
                    raise OSError(ctypes.get_errno(), 'close_range')
                lo = hi + 1
            return
        except OSError:
            # Not in this kernel (ENOSYS), or refused (a container's
            # filter): the gaps already closed stay closed.
            _close_range_works[0] = False
    try:
        fds = [int(name) for name in os.listdir('/proc/self/fd')]
    except OSError:
        lo = 3
        for fd in sorted(keep):
            os.closerange(lo, fd)
            lo = fd + 1
        os.closerange(lo, 1 << 16)
        return
    for fd in fds:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _run_main(path):
    """Run path as `python path` would, including the interpreter's shutdown
    steps; return the exit status and whether an uncaught KeyboardInterrupt
    ended it."""
    # numpy's legacy global generator is not reseeded on fork (os.fork
    # reseeds the random module itself).
    np_random = sys.modules.get('numpy.random')
    if np_random is not None:
        try:
            np_random.seed()
        except Exception:
            pass

    main = type(sys)('__main__')
    d = main.__dict__
    # The names a fresh interpreter's __main__ starts with, in its order.
    for name in _MAIN_NAMES:
        if name == '__annotations__':
            d[name] = {}
        elif name == '__builtins__':
            d[name] = builtins
        elif name not in d:
            d[name] = None
    if _SourceFileLoader is not None:
        d['__loader__'] = _SourceFileLoader('__main__', path)
    d['__file__'] = path
    d['__cached__'] = None
    sys.modules['__main__'] = main
    sys.argv = [path]
    if hasattr(sys, 'orig_argv'):
        sys.orig_argv = [sys.executable, path]
    if not getattr(sys.flags, 'safe_path', False):
        sys.path.insert(0, os.path.dirname(os.path.realpath(path)))

    try:
        with open(path, 'rb') as f:
            source = f.read()
    except OSError as e:
        sys.stderr.write("%s: can't open file %r: [Errno %s] %s\n" % (sys.executable, path, e.errno, e.strerror))
        sys.stderr.flush()
        return 2, False
    exitcode = 0
    interrupted = False
    try:
        code = compile(source, path, 'exec', dont_inherit=True)
        del source
        exec(code, d)
    except SystemExit as e:
        exitcode = _system_exit_code(e)
    except BaseException as e:
        _print_uncaught(e)
        exitcode = 1
        interrupted = isinstance(e, KeyboardInterrupt)
    if _richout is not None:
        _richout.job_end()
    return _shutdown(d, exitcode), interrupted


def _system_exit_code(e):
    """The exit status for an uncaught SystemExit, as CPython computes it."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        if not -(1 << 63) <= code < (1 << 63):
            return 255
        return code & 0xFF
    err = sys.stderr
    try:
        if err is not None:
            err.write(str(code) + '\n')
        else:
            os.write(2, (str(code) + '\n').encode())
    except Exception:
        pass
    return 1


def _print_uncaught(e):
    """Print an uncaught exception through sys.excepthook, without the
    zygote's own frames at the head of its traceback."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _ZYGOTE_FILE:
        tb = tb.tb_next
    e.__traceback__ = tb
    t = type(e)
    sys.last_type, sys.last_value, sys.last_traceback = t, e, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = e
    hook = getattr(sys, 'excepthook', None)
    try:
        if hook is None:
            raise RuntimeError('lost sys.excepthook')
        hook(t, e, tb)
    except BaseException as e2:
        try:
            err = sys.stderr
            err.write('Error in sys.excepthook:\n')
            sys.__excepthook__(type(e2), e2, e2.__traceback__)
            err.write('\nOriginal exception was:\n')
            sys.__excepthook__(t, e, tb)
        except BaseException:
            pass


def _shutdown(d, exitcode):
    """What interpreter shutdown does that a job can observe: wait for
    non-daemon threads, run atexit handlers, flush stdout and stderr, and let
    the main module's objects go (their __del__ methods run, and files only
    they hold are flushed and closed)."""
    th = sys.modules.get('threading')
    if th is not None:
        try:
            th._shutdown()
        except BaseException as e:
            _write_unraisable(e, th._shutdown)
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    if not _flush_std():
        exitcode = 120
    # As CPython clears a module: names with one leading underscore first,
    # then everything but __builtins__.
    try:
        for key in [k for k in d if k[:1] == '_' and k[1:2] != '_']:
            d[key] = None
        for key in [k for k in d if k != '__builtins__']:
            d[key] = None
        gc.collect()
    except BaseException:
        pass
    _flush_std()
    return exitcode


# What an environment's site start-up would have run, put off to each job
# (_site_without_code, _run_site_code): (sitedir, .pth file, line) of each
# import line of a .pth file, and whether there is a sitecustomize or a
# usercustomize module to import.
_SITE_LINES = []
_SITE_CUSTOMIZE = [False, False]
# What _keep_pth_imports reads of the .pth files, in bytes: of one file, and
# of all together (what is left, a list so the function can spend it). A
# package's .pth files are untrusted, and the zygote reads them as root,
# outside every job's limits: each line that is not an import is a path
# stat()ed, and a .pth of 8 MB of "x" lines (8 KB as a wheel) cost 25 s of
# CPU at start-up (spares and one-shot zygotes pay it again). Real ones are
# a few lines. What lies past the bounds is left out, for the jobs too.
_PTH_FILE_BYTES = 64 << 10
_PTH_BYTES_LEFT = [1 << 20]


def _site_without_code():
    """Do what the site module does when an interpreter starts, but run
    none of the environment's code: the zygote runs with -S, root and with
    the capabilities that set up every job's sandbox, and sees every
    session's directories, so a .pth file or a sitecustomize module that an
    installed package brought (a wheel needs no build to ship one) must not
    run in it. site.main() runs with the steps that would run code replaced
    (addpackage by _keep_pth_imports; execsitecustomize, execusercustomize):
    the site-packages directories (a venv's, the user's if enabled) and the
    directories the .pth files name go on sys.path as site would put them;
    the .pth files' import lines, sitecustomize and usercustomize are left
    to each job, which runs them as its session's uid in its sandbox before
    its own code (_run_site_code). Does nothing where site ran already."""
    if not sys.flags.no_site:
        return
    import site
    saved = site.addpackage, site.execsitecustomize, site.execusercustomize
    site.addpackage = _keep_pth_imports
    site.execsitecustomize = site.execusercustomize = lambda: None
    try:
        site.main()
    finally:
        site.addpackage, site.execsitecustomize, site.execusercustomize = saved
    from importlib.machinery import PathFinder
    _SITE_CUSTOMIZE[0] = PathFinder.find_spec('sitecustomize') is not None
    _SITE_CUSTOMIZE[1] = bool(site.ENABLE_USER_SITE) and PathFinder.find_spec('usercustomize') is not None


def _keep_pth_imports(sitedir, name, known_paths):
    """site.addpackage, except that a .pth file's import lines are kept
    for the jobs (_SITE_LINES) instead of run."""
    import site
    reset = known_paths is None
    if reset:
        known_paths = site._init_pathinfo()
    fullname = os.path.join(sitedir, name)
    room = min(_PTH_FILE_BYTES, _PTH_BYTES_LEFT[0])
    if room <= 0:
        return None if reset else known_paths
    try:
        # O_NONBLOCK: a FIFO in a .pth's place must not hold the zygote.
        fd = os.open(fullname, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with open(fd, 'rb') as f:
            if os.fstat(fd).st_mode & 0o170000 != 0o100000:  # not a regular file
                return None if reset else known_paths
            data = f.read(room)
            if len(data) == room and f.read(1):
                data = data[:data.rfind(b'\n') + 1]  # no line cut in two
    except OSError:
        return None if reset else known_paths
    _PTH_BYTES_LEFT[0] -= len(data)
    try:
        text = data.decode('utf-8-sig')
    except UnicodeDecodeError:
        text = data.decode('latin-1')
    for line in text.splitlines():
        if line.startswith('#') or not line.strip():
            continue
        if line.startswith(('import ', 'import\t')):
            _SITE_LINES.append((sitedir, fullname, line))
            continue
        d, dcase = site.makepath(sitedir, line.rstrip())
        if dcase not in known_paths and os.path.exists(d):
            sys.path.append(d)
            known_paths.add(dcase)
    return None if reset else known_paths


def _run_site_code():
    """Run, in a job's process, what _site_without_code left to it, as
    site would have at start-up: each .pth file's import lines (an error
    is printed and the rest of that file skipped), then sitecustomize and
    usercustomize."""
    if not (_SITE_LINES or _SITE_CUSTOMIZE[0] or _SITE_CUSTOMIZE[1]):
        return
    import site
    skip = None
    for sitedir, fullname, line in _SITE_LINES:
        if fullname == skip:
            continue
        try:
            _exec_pth_line(sitedir, line)
        except Exception:
            import traceback
            sys.stderr.write('Error processing line of %s:\n' % fullname)
            traceback.print_exc()
            skip = fullname
    if _SITE_CUSTOMIZE[0]:
        site.execsitecustomize()
    if _SITE_CUSTOMIZE[1]:
        site.execusercustomize()


def _exec_pth_line(sitedir, line):
    # As site.addpackage runs it: some lines read `sitedir` from their
    # caller's frame (sys._getframe(1).f_locals['sitedir']).
    exec(line)


def _load_richout(source):
    """richout.py's source as a module of its own, or None without one."""
    global _richout
    if source:
        m = type(sys)('_codexec_richout')
        exec(compile(source, '<codexec-richout>', 'exec'), m.__dict__)
        _richout = m


def _main():
    ctl = _ctl  # noqa: F821 (the bootstrap's socket on fd 3)
    cfg = json.loads(sys.argv[1])
    _load_richout(globals().get('_RICHOUT_SOURCE'))
    # `python -c` puts the current directory first on sys.path; a job's
    # script directory takes that place in each child.
    if sys.path and sys.path[0] == '':
        del sys.path[0]
    sandbox = cfg.get('sandbox')
    global _ROOTLESS
    _ROOTLESS = bool(sandbox is not None and sandbox.get('rootless'))
    if sandbox is not None and sandbox.get('seccomp'):
        _prepare_seccomp(sandbox['seccomp'])
    if sandbox is not None and not sandbox.get('rootless'):
        # Each job mounts a /proc of its own PID namespace; this one is the
        # zygote's, hidden from other uids all the same.
        _mount('proc', '/proc', 'proc', _MS_REMOUNT | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, 'hidepid=2')
    global _KEEPER
    _KEEPER = _keeper()
    if sandbox is None and _prctl is not None:
        # What a job leaves behind (its keeper, what it started) comes to
        # the zygote when the job's process ends, and reap() collects it;
        # not to the worker's namespace's init, which may be a process
        # that never reaps (the worker itself, as a container's pid 1).
        # In a sandbox the zygote is its PID namespace's init already.
        _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    z = _Zygote(ctl, sandbox)
    t0 = time.monotonic()
    # The standard library's modules first, before the environment's
    # directories are on sys.path: none of them can then import a module
    # of the environment's (an optional one they try) in the zygote.
    preload = cfg.get('preload') or []
    loaded, failed = z.preload(preload)
    _site_without_code()
    # What is not in the standard library comes from the environment: a
    # module the operator asked to preload runs its code in the zygote.
    missing = [n for n in preload if n in failed and failed[n].startswith('ModuleNotFoundError')]
    if missing:
        for n in missing:
            del failed[n]
        more, failed_more = z.preload(missing)
        loaded = [n for n in preload if n in loaded or n in more]
        failed.update(failed_more)
    import_ms = (time.monotonic() - t0) * 1000
    threads = _threads()
    gc.collect()
    gc.freeze()
    _send(ctl, {
        'op': 'ready', 'pid': z.pid, 'python': '%d.%d.%d' % sys.version_info[:3],
        'preloaded': loaded, 'failed': failed, 'threads': threads, 'import_ms': round(import_ms, 1),
        'keeper': _KEEPER is not None,
    })
    if threads:
        # Forking now could copy a lock that another thread holds.
        os._exit(3)
    z.serve()


_main()
