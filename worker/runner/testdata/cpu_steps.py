# Where a job's process spends its CPU before the job's code runs, step by step: `codexec dev` built with
# cpu_steps_patch.py, print(1) over stdio, N calls from C callers; prints, per step, the median CPU time (µs, user
# and system) of the job's process, for each sandbox mode named (default: require, then off). VENV is the
# interpreter's venv. Data goes under DATA (default /var/tmp: under /tmp each sandboxed spare would bind back what
# lies there over its fresh /tmp, which the default data directory does not need; VENV likewise).
#
#     VENV=... C=1 N=100 python3 worker/runner/testdata/cpu_steps.py /tmp/codexec-cpu require off
import collections, json, os, statistics, sys, threading

import devrpc

exe = sys.argv[1]
modes = sys.argv[2:] or ['require', 'off']
C = int(os.environ.get('C', '1')); N = int(os.environ.get('N', '100'))


def measure(sb):
    dev = devrpc.Dev(exe, sb, os.environ['VENV'], '%s/cpu-steps-%s-%d' % (os.environ.get('DATA', '/var/tmp'), sb, os.getpid()))
    for _ in range(10):
        dev.run('print(1)')
    steps = collections.defaultdict(list)
    count = [0]

    def caller(n):
        for _ in range(n):
            err = dev.run('print(1)').get('stderr', '')
            for line in err.splitlines():
                if line.startswith('CPUSTEPS '):
                    count[0] += 1
                    for name, ns in json.loads(line[9:]).items():
                        steps[name].append(ns / 1000)

    threads = [threading.Thread(target=caller, args=(N // C,)) for _ in range(C)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dev.close()
    print('sandbox %s, %d callers, %d jobs: CPU of the job\'s process, µs, median (steps nest)' % (sb, C, count[0]))
    for name, v in sorted(steps.items(), key=lambda kv: -statistics.median(kv[1])):
        # A step a job did not take counts as 0 for it.
        print('  %-32s %7.0f' % (name, statistics.median(v + [0] * (count[0] - len(v)))))


for sb in modes:
    measure(sb)
