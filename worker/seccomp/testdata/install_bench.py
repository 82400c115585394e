# What installing the jobs' system-call filter costs a forked process: the prctl that zygote.py's _install_seccomp
# makes, timed in N forked children with and without it, alternating twice; p50 in microseconds. The kernel
# compiles the filter and runs it once per call of the system-call table to fill its action cache.
#
#     go run ./worker/seccomp/testdata/dump > /tmp/filter.bin && python3 worker/seccomp/testdata/install_bench.py /tmp/filter.bin
import ctypes, os, statistics, sys, time

libc = ctypes.CDLL(None, use_errno=True)
prog = open(sys.argv[1], 'rb').read()
N = int(os.environ.get('N', '300'))


class SockFprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]


buf = ctypes.create_string_buffer(prog, len(prog))
fprog = SockFprog(len(prog) // 8, ctypes.addressof(buf))


def child(install):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            t = time.perf_counter_ns()
            if install and libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
                os._exit(1)
            os.write(w, b'%d' % (time.perf_counter_ns() - t))
        finally:
            os._exit(0)
    os.close(w)
    data = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    if not data:
        sys.exit('the filter was refused')
    return int(data) / 1000


print('%d instructions' % (len(prog) // 8))
for _ in range(2):
    for install in (False, True):
        print('filter installed: %-5s p50 %7.1f us' % (install, statistics.median(child(install) for _ in range(N))))
