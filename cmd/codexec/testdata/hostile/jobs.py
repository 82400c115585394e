"""Job code of the hostile suite. Each probe prints a line starting with LEAK
when the attack got through; anything else is containment."""

SYSCALLS = r'''
import ctypes, os, errno, socket
libc = ctypes.CDLL(None, use_errno=True)
sc = libc.syscall
sc.restype = ctypes.c_long
def call(name, nr, *args):
    r = sc(nr, *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    e = ctypes.get_errno()
    if r >= 0:
        print("LEAK", name, "returned", r)
    else:
        print("ok", name, errno.errorcode.get(e, e))
buf = ctypes.create_string_buffer(256)
call("unshare(NEWUSER)", 272, 0x10000000)
call("unshare(NEWNS)", 272, 0x00020000)
call("unshare(NEWNET)", 272, 0x40000000)
call("clone(NEWUSER)", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("setns", 308, 0, 0)
call("mount", 165, b"none", b"/tmp", b"tmpfs", 0, 0)
call("umount2", 166, b"/proc", 2)
call("pivot_root", 155, b"/", b"/")
call("chroot", 161, b"/tmp")
call("bpf", 321, 0, buf, 48)
call("perf_event_open", 298, buf, 0, -1, -1, 0)
call("io_uring_setup", 425, 8, buf)
call("io_uring_register", 427, 0, 0, 0, 0)
call("io_setup", 206, 65536, buf)
call("userfaultfd", 323, 0)
call("add_key", 248, b"user", b"x", b"y", 1, -3)
call("keyctl", 250, 0, -3, 0)
call("request_key", 249, b"user", b"x", 0, 0)
call("ptrace(ATTACH ppid)", 101, 16, os.getppid(), 0, 0)
call("ptrace(TRACEME)", 101, 0, 0, 0, 0)
call("process_vm_readv", 310, os.getppid(), buf, 1, buf, 1, 0)
call("kcmp", 312, 1, 1, 0, 0, 0)
call("pidfd_getfd", 438, 0, 0, 0)
call("personality(READ_IMPLIES_EXEC)", 135, 0x0400000)
call("personality(ADDR_NO_RANDOMIZE)", 135, 0x0040000)
call("init_module", 175, buf, 0, b"")
call("finit_module", 313, 0, b"", 0)
call("kexec_load", 246, 0, 0, 0, 0)
call("syslog(READ_ALL)", 103, 3, buf, 100)
call("iopl", 172, 3)
call("ioperm", 173, 0, 100, 1)
call("swapon", 167, b"/tmp/x", 0)
call("acct", 163, b"/tmp/acct")
call("settimeofday", 164, buf, 0)
call("clock_settime", 227, 0, buf)
call("open_by_handle_at", 304, 0, buf, 0)
call("name_to_handle_at", 303, -100, b"/", buf, buf, 0)
call("fsopen", 430, b"tmpfs", 0)
call("open_tree", 428, -100, b"/", 1)
call("move_mount", 429, -100, b"/", -100, b"/tmp", 0)
call("mount_setattr", 442, -100, b"/", 0, buf, 32)
call("fanotify_init", 300, 0, 0)
call("quotactl", 179, 0, b"/", 0, 0)
call("vhangup", 153)
call("lookup_dcookie", 212, 0, buf, 10)
call("memfd_secret", 447, 0)
call("modify_ldt", 154, 1, buf, 16)
call("uselib", 134, b"/lib")
call("reboot", 169, 0xfee1dead, 672274793, 0x4321fedc, 0)
call("sethostname", 170, b"x", 1)
call("setuid(0)", 105, 0)
call("setgid(0)", 106, 0)
call("capset", 126, buf, buf)
call("x32 getpid", 0x40000000 | 39)
call("x32 unshare", 0x40000000 | 272, 0x10000000)
for fam, typ, proto, name in [(17, 3, 0, "AF_PACKET"), (17, 10, 0, "SOCK_PACKET"), (2, 3, 255, "raw inet"), (10, 3, 58, "raw inet6"),
                               (16, 3, 12, "NETLINK_NETFILTER"), (16, 3, 9, "NETLINK_AUDIT"), (16, 3, 15, "NETLINK_KOBJECT_UEVENT"),
                               (16, 3, 4, "NETLINK_SOCK_DIAG"), (16, 3, 6, "NETLINK_XFRM"), (16, 3, 16, "NETLINK_GENERIC"),
                               (40, 1, 0, "AF_VSOCK"), (38, 5, 0, "AF_ALG"), (31, 1, 0, "AF_BLUETOOTH"), (9, 2, 0, "AF_X25"),
                               (4, 2, 0, "AF_IPX"), (5, 2, 0, "AF_APPLETALK"), (3, 2, 0, "AF_AX25"), (29, 3, 1, "AF_CAN"),
                               (42, 2, 0, "AF_QIPCRTR"), (44, 1, 0, "AF_XDP"), (21, 1, 0, "AF_RDS"), (30, 1, 0, "AF_TIPC"),
                               (2, 1, 262, "MPTCP"), (2, 2, 136, "UDPLITE"), (2, 1, 132, "SCTP"), (2, 5, 132, "SCTP seqpacket"),
                               (2, 2, 0xff, "inet dgram proto 255")]:
    r = libc.socket(fam, typ, proto); e = ctypes.get_errno()
    print(("LEAK socket " if r >= 0 else "ok socket ") + name, r if r >= 0 else errno.errorcode.get(e, e))
for fam, name in [(17, "AF_PACKET"), (16, "AF_NETLINK"), (40, "AF_VSOCK"), (38, "AF_ALG"), (30, "AF_TIPC")]:
    sv = (ctypes.c_int * 2)()
    r = libc.socketpair(fam, 1, 0, sv); e = ctypes.get_errno()
    print(("LEAK socketpair " if r >= 0 else "ok socketpair ") + name, r if r >= 0 else errno.errorcode.get(e, e))
'''

WHOAMI = r'''
import os
st = open('/proc/self/status').read()
caps = [l for l in st.splitlines() if l.startswith(('Cap', 'NoNewPrivs', 'Seccomp', 'Uid', 'Gid', 'Groups'))]
print(os.getuid(), os.getcwd(), caps)
for l in caps:
    k, v = l.split(':', 1)
    if k.startswith('Cap') and k != 'CapBnd' and int(v.strip(), 16) != 0: print('LEAK capability', l)
    if k == 'NoNewPrivs' and v.strip() != '1': print('LEAK no_new_privs off')
    if k == 'Seccomp' and v.strip() != '2': print('LEAK no seccomp filter')
    if k == 'Uid' and v.split()[0] == '0': print('LEAK uid 0')
print('fds', os.listdir('/proc/self/fd'))
for fd in os.listdir('/proc/self/fd'):
    if int(fd) > 3:
        try: print('LEAK extra fd', fd, os.readlink('/proc/self/fd/' + fd))
        except OSError: pass
'''

# Host secrets the job must not see; CANARY is replaced by the caller.
HOST_WALK = r'''
import os, re
canaries = [c.replace('+', '') for c in CANARIES]
found = []
skip = ('/proc', '/sys', '/usr', '/dev')
n = 0
for top in ['/']:
    for d, dirs, files in os.walk(top, onerror=lambda e: None):
        if d.startswith(skip): dirs[:] = []; continue
        for f in files + dirs:
            p = os.path.join(d, f)
            n += 1
            if any(c in f for c in canaries): print('LEAK name', p)
        for f in files:
            p = os.path.join(d, f)
            try:
                if os.path.islink(p) or os.path.getsize(p) > 1 << 20: continue
                with open(p, 'rb') as fh: b = fh.read(1 << 20)
            except Exception: continue
            for c in canaries:
                if c.encode() in b: print('LEAK content', c, p)
print('walked', n)
for p in ['/etc/shadow', '/root', '/home', DATA_DIR, DATA_DIR + '/state.db', '/proc/1/root/etc/shadow', '/proc/self/root/../../etc/shadow',
          '/run', '/var/lib', '/var/run/docker.sock', '/tmp', '/dev/shm', '/sys/fs/cgroup', '/proc/kcore', '/proc/sysrq-trigger', '/dev/mem', '/dev/kmsg']:
    try:
        if os.path.isdir(p): r = os.listdir(p)
        else:
            with open(p, 'rb') as fh: r = fh.read(200)
        print('reached', p, str(r)[:200])
        if p in ('/etc/shadow', DATA_DIR + '/state.db', '/proc/1/root/etc/shadow', '/proc/self/root/../../etc/shadow', '/proc/kcore', '/dev/mem', '/dev/kmsg') or (p == DATA_DIR and set(r) & {'state.db', 'disks', 'uids', 'nats', 'jetstream'}): print('LEAK read', p)
        if p in ('/root', '/home') and r: print('LEAK listed', p, r[:5])
    except Exception as e: print('refused', p, type(e).__name__)
for pid in os.listdir('/proc'):
    if not pid.isdigit(): continue
    for f in ('environ', 'cmdline'):
        try:
            b = open(f'/proc/{pid}/{f}', 'rb').read()
            for c in canaries:
                if c.encode() in b: print('LEAK', pid, f, c)
        except Exception: pass
print('pids', [p for p in os.listdir('/proc') if p.isdigit()])
'''

NET = r'''
import socket
for port in PORTS:
    for host in ['127.0.0.1', '::1', HOSTIP]:
        try:
            s = socket.create_connection((host, port), 1); print('LEAK connected', host, port); s.close()
        except Exception as e: print('ok', host, port, type(e).__name__)
for name in ['\0codexec', '\0nats', '\0/tmp/.X11-unix/X0']:
    s = socket.socket(socket.AF_UNIX)
    try: s.connect(name); print('LEAK abstract', repr(name))
    except Exception as e: print('ok abstract', repr(name), type(e).__name__)
try:
    print(open('/proc/net/unix').read()[:2000])
except Exception as e: print('no /proc/net/unix', e)
'''

# Resource exhaustion: each must end, the server must stay responsive.
FORK_BOMB = r'''
import os
n = 0
try:
    while True:
        if os.fork() == 0:
            import time; time.sleep(30); os._exit(0)
        n += 1
except OSError as e: print('stopped after', n, e)
'''

THREAD_BOMB = r'''
import threading, time
n = 0
try:
    while True:
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); n += 1
except Exception as e: print('stopped after', n, e)
'''

MEM_BOMB = r'''
x = []
while True: x.append(bytearray(64 << 20))
'''

FALLOCATE = r'''
import os
for i in range(40):
    fd = os.open(f'big{i}', os.O_CREAT | os.O_WRONLY)
    try: os.posix_fallocate(fd, 0, 19 << 20)
    except OSError as e: print('refused at', i, e); break
    finally: os.close(fd)
else: print('LEAK reserved', 40 * 19, 'MiB at disk_mb=20')
'''

SPARSE = r'''
import os
fd = os.open('sparse', os.O_CREAT | os.O_WRONLY)
try:
    os.ftruncate(fd, 100 << 30); print('sparse 100 GiB made (only counts if blocks are used)')
    os.pwrite(fd, b'x', 50 << 30); print('LEAK wrote at 50 GiB offset')
except OSError as e: print('refused', e)
'''

INODES = r'''
import os
os.makedirs('inodes', exist_ok=True)
n = 0
try:
    for i in range(200000):
        open(f'inodes/{i}', 'w').close(); n += 1
    print('LEAK made', n, 'empty files at disk_mb=20')
except OSError as e: print('refused after', n, e)
'''

DEEP = r'''
import os
os.makedirs('deep', exist_ok=True); os.chdir('deep')
n = 0
try:
    for i in range(30000):
        os.mkdir('d' * 200); os.chdir('d' * 200); n += 1
        if i % 100 == 0:
            with open('f', 'wb') as f: f.write(b'x' * (64 << 10))
    print('LEAK nested', n, 'directories with data at disk_mb=20')
except OSError as e: print('refused after', n, e)
'''

PTYS = r'''
import os, pty
fds = []
try:
    for i in range(5000):
        fds.append(pty.openpty())
    print('LEAK opened', len(fds), 'ptys')
except OSError as e: print('stopped after', len(fds), e)
'''

NOFILE = r'''
import os
fds = []
try:
    while True: fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e: print('stopped after', len(fds), e)
'''

STDOUT_FLOOD = r'''
import sys, os
b = b'A' * (1 << 20)
for i in range(300): os.write(1, b)
'''

STDERR_FLOOD = r'''
import os
b = b'E' * (1 << 20)
for i in range(300): os.write(2, b)
'''

LINE_FLOOD = r'''
import sys
for i in range(200000): print(i, flush=True)
'''

ZOMBIES = r'''
import os
for i in range(200):
    if os.fork() == 0: os._exit(0)
print('left 200 zombies')
'''

SURVIVOR = r'''
import os, time
# double fork + setsid: a daemon that should die with the job
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for s in range(1, 32):
            try:
                import signal; signal.signal(s, signal.SIG_IGN)
            except Exception: pass
        open(MARK, 'w').write(str(os.getpid()))
        while True:
            time.sleep(0.2)
            with open(MARK, 'a') as f: f.write('.')
    os._exit(0)
time.sleep(0.5)
print('spawned')
'''

FORGE = r'''
import os, signal, struct
# write forged results on every descriptor we may hold, then signal everything we can see, then fail
for fd in range(3, 256):
    for msg in (b'0', b'{"status":"ok","exit_code":0}\n', struct.pack('<i', 0)):
        try: os.write(fd, msg)
        except OSError: pass
for fd in (0, 1, 2):
    try: os.write(fd, b'\x00{"jsonrpc":"2.0","id":1,"result":{}}\n')
    except OSError: pass
for pid in range(1, 100):
    if pid == os.getpid(): continue
    for s in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP):
        try: os.kill(pid, s); print('signalled', pid, s)
        except OSError: pass
try: os.kill(-1, signal.SIGKILL)
except OSError as e: print('kill -1', e)
raise SystemExit(3)
'''

SHM = r'''
import os, mmap, ctypes
libc = ctypes.CDLL(None, use_errno=True)
# SysV shared memory: list segments of others (IPC namespace)
try: print('sysvipc', open('/proc/sysvipc/shm').read()[:500])
except Exception as e: print('no sysvipc', e)
for key in range(1, 64):
    r = libc.shmget(key, 0, 0)
    if r >= 0: print('LEAK shm key', key)
print('dev/shm', os.listdir('/dev/shm'))
for f in os.listdir('/dev/shm'):
    if 'SECRET' in f: print('LEAK /dev/shm', f)
'''

CGROUP = r'''
import os
n = 0
for d, dirs, files in os.walk('/sys/fs/cgroup'):
    n += 1
    if n < 30: print(d, len(files))
    for f in files:
        if f in ('cgroup.procs', 'tasks', 'memory.limit_in_bytes', 'memory.max', 'pids.max', 'cgroup.subtree_control', 'memory.memsw.limit_in_bytes', 'cpu.shares', 'release_agent', 'notify_on_release'):
            p = os.path.join(d, f)
            try:
                with open(p, 'w') as fh: fh.write(str(os.getpid()) if f in ('cgroup.procs', 'tasks') else '-1' if 'max' not in f else 'max')
                print('LEAK wrote', p)
            except OSError as e: pass
print('cgroup dirs', n)
print(open('/proc/self/cgroup').read())
'''

ZYGOTE_MEMORY = r'''
import gc, os, re, sys
# A job is a fork of its zygote: look for any other session's scope in the
# objects it inherited (frozen ones included) and in its own readable pages.
me = os.getcwd().split('/sessions/')[1].split('/')[0].encode()
pat = re.compile(rb's-[0-9a-f]{32}')
gc.unfreeze()
todo, seen, alive = gc.get_objects() + [sys._getframe(), sys.modules], set(), []
while todo:
    o = todo.pop()
    if id(o) in seen: continue
    seen.add(id(o)); alive.append(o)
    if isinstance(o, (str, bytes, bytearray)):
        b = o.encode('utf-8', 'surrogatepass') if isinstance(o, str) else bytes(o)
        for m in set(pat.findall(b)) - {me}: print('LEAK object holds', m.decode(), type(o).__name__)
    else:
        todo.extend(gc.get_referents(o))
        if isinstance(o, dict): todo.extend(o)
mem = open('/proc/self/mem', 'rb', buffering=0)
found = set()
for line in open('/proc/self/maps').read().splitlines():
    p = line.split()
    if p[1][0] != 'r': continue
    a, b = (int(x, 16) for x in p[0].split('-'))
    try:
        mem.seek(a); found |= set(pat.findall(mem.read(b - a)))
    except (OSError, OverflowError, ValueError): pass
for m in found - {me}: print('LEAK memory holds', m.decode())
print('ok scanned', len(seen), 'objects')
'''
