# How long creating a job's script takes on a directory's file system: a
# new file opened with O_CREAT|O_EXCL, 9 bytes written, closed, unlinked,
# as the worker writes and removes each job's script. Prints the p50 and
# p90 of the create (open, write, close) and of the unlink, per directory.
#
#     python3 worker/testdata/create_file_bench.py /tmp/x /dev/shm/x [N]
import os, sys, time
n = int(sys.argv[-1]) if sys.argv[-1].isdigit() else 2000
for d in [a for a in sys.argv[1:] if not a.isdigit()]:
    os.makedirs(d, exist_ok=True)
    create, unlink = [], []
    for i in range(n):
        p = os.path.join(d, '%d_main.py' % i)
        t0 = time.perf_counter()
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b'print(1)\n')
        os.close(fd)
        t1 = time.perf_counter()
        os.unlink(p)
        unlink.append(time.perf_counter() - t1)
        create.append(t1 - t0)
    create.sort(); unlink.sort()
    print('%s: create p50 %.1f us p90 %.1f us; unlink p50 %.1f us' % (
        d, create[n // 2] * 1e6, create[n * 9 // 10] * 1e6, unlink[n // 2] * 1e6))
