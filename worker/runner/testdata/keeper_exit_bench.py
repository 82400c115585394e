# The keeper's effect on a forked interpreter's exit (zygote.py: _keep_address_space): a process with the default
# preloads forks 200 children; each exits at once, with (keeper) or without (none) a clone(CLONE_VM) keeper made
# first; prints the median time from the child's last step to its parent's waitpid. x86-64 only.
#
#     python3 worker/runner/testdata/keeper_exit_bench.py none; python3 worker/runner/testdata/keeper_exit_bench.py keeper
import os, time, statistics, sys, gc, ctypes, mmap, signal
mods = "json decimal email.message asyncio http.client urllib.request".split()
for m in mods: __import__(m)
libc = ctypes.CDLL(None, use_errno=True)
CLONE_VM = 0x100
code = bytes.fromhex('b822000000' '0f05' 'ebf7')  # pause loop
def keep_mm():
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    stack = mmap.mmap(-1, 16384)
    top = ctypes.addressof(ctypes.c_char.from_buffer(stack)) + 16384 - 64
    fn = ctypes.cast(addr, ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p))
    old = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    pid = libc.clone(fn, ctypes.c_void_p(top), CLONE_VM | signal.SIGCHLD, None)
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return pid, m, stack
gc.freeze()
r, w = os.pipe()
res = []
use = sys.argv[1] == "keeper"
for i in range(200):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setpgid(0, 0)
        if use:
            h = keep_mm()
        x = [str(j) for j in range(2000)]
        t = time.monotonic_ns()
        os.write(w, str(t).encode().ljust(32))
        os._exit(0)
    t = int(os.read(r, 32))
    os.waitpid(pid, 0)
    res.append((time.monotonic_ns() - t) / 1e6)
    try: os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError: pass
print('%s exit->reaped p50 %.3f ms' % (sys.argv[1], statistics.median(res)))
