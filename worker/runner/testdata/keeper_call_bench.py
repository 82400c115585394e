# What making the keeper costs at the end of a job (zygote.py: _keep_address_space), done the two ways it was
# done: "python" (signal.pthread_sigmask, ctypes' close_range, os.chdir and libc's clone, zygote.py before
# 2026-12-03 night) or "machine" (zygote.py's own _keep_address_space: one call into machine code). A process with
# the default preloads forks 200 children; each, in a directory of its own and holding a descriptor, runs a little
# Python, then makes its keeper and exits; prints the median time from the child's last Python step before the
# keeper to its parent's waitpid. x86-64 only.
#
#     python3 worker/runner/testdata/keeper_call_bench.py python; python3 worker/runner/testdata/keeper_call_bench.py machine
import ctypes, gc, os, signal, statistics, struct, sys, tempfile, time, mmap
mods = "json decimal email.message asyncio http.client urllib.request".split()
for m in mods:
    __import__(m)
here = os.path.dirname(os.path.abspath(__file__))
src = open(os.path.join(here, '..', 'zygote.py')).read().rsplit('\n_main()', 1)[0]
z = {'__name__': 'zygote_under_bench'}
exec(compile(src, 'zygote.py', 'exec'), z)
z['_KEEPER'] = z['_keeper']()
libc = ctypes.CDLL(None, use_errno=True)
old_code = bytes.fromhex('b8220000000f05ebf7')  # the pause loop the Python steps cloned into


def old_keeper():
    m = mmap.mmap(-1, 4096)
    m.write(old_code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    libc.mprotect(ctypes.c_void_p(addr), 4096, 5)
    stack = mmap.mmap(-1, 16384)
    top = ctypes.addressof(ctypes.c_char.from_buffer(stack)) + 16384 - 64
    return ctypes.cast(addr, ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)), top, (m, stack)


OLD = old_keeper()


def python_steps():
    fn, top, _ = OLD
    libc.close_range(3, 0xFFFFFFFF, 0)
    os.chdir('/')
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        libc.clone(fn, ctypes.c_void_p(top), 0x100 | int(signal.SIGCHLD), None)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


how = {'python': python_steps, 'machine': z['_keep_address_space']}[sys.argv[1]]
shared = mmap.mmap(-1, 4096)
d = tempfile.mkdtemp()
gc.freeze()
res = []
for i in range(200):
    pid = os.fork()
    if pid == 0:
        os.setpgid(0, 0)
        os.chdir(d)
        os.open(d, os.O_RDONLY)
        x = [str(j) for j in range(2000)]
        struct.pack_into('q', shared, 0, time.monotonic_ns())
        how()
        os._exit(0)
    os.waitpid(pid, 0)
    res.append((time.monotonic_ns() - struct.unpack_from('q', shared, 0)[0]) / 1e6)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
os.rmdir(d)
print('%s: keeper made, exit -> reaped p50 %.3f ms' % (sys.argv[1], statistics.median(res)))
