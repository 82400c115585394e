# What each part of a sandboxed job's process costs, as jobs per second of
# K concurrent loops that each fork a child doing that part, then reap it.
# The parent imports modules like a zygote's preloads first, so that each
# fork copies an interpreter of a zygote's size. Needs root (namespaces,
# mounts); the mounts happen in private mount namespaces.
#
#     python3 worker/runner/testdata/sandbox_parts_bench.py K SECONDS PART...
#
# PART, joined with '+': fork (a fork, nothing else), fork3 (three nested
# forks, as a sandboxed spare took before 2026-12-03), ns (a mount
# namespace), ipc (an IPC namespace), net (a network namespace, loopback
# up), setns (joining one network namespace made once), tmp (tmpfs on /tmp
# and /dev/shm), pid2 (a PID namespace, its init and the job's process: two
# forks), init (a PID namespace whose init is zygote.py's small init, started
# by vfork and exec, and the job's process forked into it as pid 2: one fork
# of the interpreter, as a sandboxed job's since 2026-12-03), proc (with a
# fresh /proc), initpy (the same with a fork of the interpreter as the
# init, which forks the job's process: two forks, a sandboxed job's from
# 048a771 until then). Each part runs ROUNDS times (default 5),
# the parts interleaved, and the medians are printed, of jobs per second and
# of the CPU time a job's processes used (the steadier figure on a shared
# machine): compare parts of one run.
import ast
import ctypes
import fcntl
import os
import signal
import socket
import struct
import sys
import time

libc = ctypes.CDLL(None, use_errno=True)
NEWNS, NEWIPC, NEWNET, NEWPID = 0x20000, 0x08000000, 0x40000000, 0x20000000
MS_REC, MS_PRIVATE = 16384, 1 << 18
NETFD = None
HOMEPID = None
INITFD = None


def small_init():
    """zygote.py's small init program (_init_program), in a memfd."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'zygote.py')
    tree = ast.parse(open(path).read())
    keep = [n for n in tree.body if (isinstance(n, ast.Assign) and getattr(n.targets[0], 'id', None) == '_INIT_X86_64')
            or (isinstance(n, ast.FunctionDef) and n.name == '_init_program')]
    ns = {'os': os, 'struct': struct}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, 'exec'), ns)
    fd = os.memfd_create('codexec-init', os.MFD_CLOEXEC)
    os.write(fd, ns['_init_program']())
    return fd

for m in 'asyncio decimal email.message http.client json logging subprocess unittest urllib.request uuid'.split():
    __import__(m)
import gc  # noqa: E402

gc.disable()
gc.freeze()


def chk(r, what):
    if r != 0:
        raise OSError(ctypes.get_errno(), what)


def mount(src, tgt, fs, flags, data):
    chk(libc.mount(src, tgt, fs, ctypes.c_ulong(flags), data), 'mount %s' % tgt)


def loopback_up():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ifr = fcntl.ioctl(s.fileno(), 0x8913, struct.pack('16sH14x', b'lo', 0))
    flags = struct.unpack('16sH14x', ifr)[1]
    fcntl.ioctl(s.fileno(), 0x8914, struct.pack('16sH14x', b'lo', flags | 1))
    s.close()


def job(parts):
    if 'ns' in parts:
        chk(libc.unshare(NEWNS), 'unshare mount')
        mount(None, b'/', None, MS_REC | MS_PRIVATE, None)
    if 'ipc' in parts:
        chk(libc.unshare(NEWIPC), 'unshare ipc')
    if 'net' in parts:
        chk(libc.unshare(NEWNET), 'unshare net')
        loopback_up()
    if 'setns' in parts:
        chk(libc.setns(NETFD, NEWNET), 'setns net')
    if 'tmp' in parts:
        for d in (b'/tmp', b'/dev/shm'):
            mount(b'tmpfs', d, b'tmpfs', 6, b'mode=1777')
    if 'fork3' in parts:
        if os.fork():
            os.wait()
            return
        if os.fork():
            os.wait()
            os._exit(0)
    if 'pid2' in parts:
        chk(libc.unshare(NEWPID), 'unshare pid')
        if os.fork():
            os.wait()
            return
        if os.fork():
            os.wait()
            os._exit(0)
        if 'proc' in parts:
            mount(b'proc', b'/proc', b'proc', 14, b'hidepid=2')
    if ('init' in parts or 'initpy' in parts) and 'proc' in parts:
        if 'ns' not in parts:  # not over the /proc of the loop, which spawns the next init from it
            chk(libc.unshare(NEWNS), 'unshare mount')
        mount(b'proc', b'/proc', b'proc', 14, b'hidepid=2')


def fork_job(parts):
    """Fork the job's process: under a small init in a new PID namespace
    ('init'), or plainly. Returns (pid, init)."""
    if 'initpy' in parts:
        chk(libc.unshare(NEWPID), 'unshare pid')
        a = os.fork()
        if a:
            chk(libc.setns(HOMEPID, NEWPID), 'setns pid')
            return a, None
        b = os.fork()  # in A, the namespace's init: fork the job's process
        if b:
            st = os.waitpid(b, 0)[1]
            os._exit(os.WEXITSTATUS(st) if os.WIFEXITED(st) else 1)
        return 0, None
    if 'init' not in parts:
        return os.fork(), None
    chk(libc.unshare(NEWPID), 'unshare pid')
    init = os.posix_spawn('/proc/self/fd/%d' % INITFD, ['codexec-init'], {})
    pid = os.fork()
    if pid:
        chk(libc.setns(HOMEPID, NEWPID), 'setns pid')
    return pid, init


def loop(parts, seconds, out):
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pid, init = fork_job(parts)
        if pid == 0:
            try:
                job(parts)
            except Exception as e:
                os.write(2, ('%s\n' % e).encode())
                os._exit(1)
            os._exit(0)
        if os.waitpid(pid, 0)[1] != 0:
            sys.exit('%s failed' % '+'.join(parts))
        if init is not None:
            os.kill(init, signal.SIGKILL)
            os.waitpid(init, 0)
        n += 1
    os.write(out, b'%d\n' % n)


def rate(parts, k, seconds):
    r, w = os.pipe()
    pids = []
    t0 = time.monotonic()
    c0 = os.times()
    for _ in range(k):
        pid = os.fork()
        if pid == 0:
            if 'ns' not in parts and ('tmp' in parts or 'pid2' in parts or 'init' in parts or 'initpy' in parts):
                chk(libc.unshare(NEWNS), 'unshare mount')
                mount(None, b'/', None, MS_REC | MS_PRIVATE, None)
            loop(parts, seconds, w)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    elapsed = time.monotonic() - t0
    c1 = os.times()
    os.close(w)
    data = b''
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        data += chunk
    os.close(r)
    n = sum(int(x) for x in data.split())
    # The CPU of every process a job made, reaped down the line (the
    # small init's too): user and system time of the reaped children.
    cpu = c1.children_user + c1.children_system - c0.children_user - c0.children_system
    return n / elapsed, cpu * 1000 / max(n, 1)


def main():
    global NETFD, HOMEPID, INITFD
    k, seconds, names = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    if any('setns' in n for n in names):
        own = os.open('/proc/self/ns/net', os.O_RDONLY)
        chk(libc.unshare(NEWNET), 'unshare net')
        loopback_up()
        NETFD = os.open('/proc/self/ns/net', os.O_RDONLY)
        chk(libc.setns(own, NEWNET), 'setns back')
    if any('init' in n for n in names):  # init and initpy
        HOMEPID = os.open('/proc/self/ns/pid', os.O_RDONLY)
        INITFD = small_init()
    rates = {n: [] for n in names}
    for _ in range(int(os.environ.get('ROUNDS', '5'))):
        for n in names:
            rates[n].append(rate(n.split('+'), k, seconds))
    for n in names:
        v = sorted(x[0] for x in rates[n])
        c = sorted(x[1] for x in rates[n])
        print('%-16s K=%-3d median %6.0f jobs/s  (%s)  CPU %5.2f ms per job' % (
            n, k, v[len(v) // 2], ' '.join('%.0f' % x for x in v), c[len(c) // 2]))


main()
