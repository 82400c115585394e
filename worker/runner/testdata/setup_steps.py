# Where a sandboxed job's set-up goes, step by step: `codexec dev` built with setup_steps_patch.py, print(1) over
# stdio, N calls from C callers; prints the round trip's p50 and, per step, the p50 of when it ended (µs since the
# job's process had its request). VENV is the interpreter's venv, SB the sandbox mode (default require).
#
#     VENV=... C=1 N=200 python3 worker/runner/testdata/setup_steps.py /tmp/codexec-steps
import collections, os, statistics, sys, threading, time

import devrpc

exe = sys.argv[1]
C = int(os.environ.get('C', '1')); N = int(os.environ.get('N', '200'))
dev = devrpc.Dev(exe, os.environ.get('SB', 'require'), os.environ['VENV'], '/tmp/setup-steps-%d' % os.getpid())
for _ in range(20):
    dev.run('print(1)')
steps, rt = collections.defaultdict(list), []


def caller(n):
    for _ in range(n):
        t = time.perf_counter()
        r = dev.run('print(1)')
        rt.append((time.perf_counter() - t) * 1000)
        for kv in r.get('stderr', '').split():
            name, _, v = kv.rpartition('=')
            if name:
                steps[name].append(float(v))


threads = [threading.Thread(target=caller, args=(N // C,)) for _ in range(C)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print('%d callers: round trip p50 %.2f ms' % (C, statistics.median(rt)))
for name, v in steps.items():
    print('  %-32s %6.0f us' % (name, statistics.median(v)))
dev.close()
