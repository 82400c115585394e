# The CPU of every process of a `codexec dev` server's tree after N sequential print(1) calls: each process's own
# (utime + stime) and its reaped children's (cutime + cstime), in clock ticks. Shows where the CPU of processes
# that are gone was counted, and that a process released without being waited for (reaped by a dying PID
# namespace init, whose SIGCHLD the kernel ignores) counts nowhere. VENV is the interpreter's venv.
#
#     VENV=... N=300 python3 worker/runner/testdata/tree_cpu.py bin/codexec [require|off]
import os, sys, time

import devrpc

exe = sys.argv[1]
sb = sys.argv[2] if len(sys.argv) > 2 else 'require'
N = int(os.environ.get('N', '300'))
dev = devrpc.Dev(exe, sb, os.environ['VENV'], '%s/tree-cpu-%d' % (os.environ.get('DATA', '/var/tmp'), os.getpid()))
p = dev.p
for _ in range(N):
    dev.run('print(1)')
time.sleep(0.5)
stats = {}
for d in os.listdir('/proc'):
    if d.isdigit():
        try:
            s = open('/proc/%s/stat' % d).read()
            f = s.rsplit(')', 1)[1].split()
            stats[int(d)] = (s[s.index('(') + 1:s.rindex(')')], int(f[1]), [int(x) for x in f[11:15]])
        except (OSError, ValueError):
            pass
total, todo = [0, 0], [p.pid]
print('sandbox %s, %d calls: pid, name, own CPU, reaped children\'s CPU (clock ticks)' % (sb, N))
while todo:
    q = todo.pop()
    if q in stats:
        name, _, t = stats[q]
        print('  %7d %-16s %6d %6d' % (q, name, t[0] + t[1], t[2] + t[3]))
        total[0] += t[0] + t[1]
        total[1] += t[2] + t[3]
    todo += [c for c, (_, pp, _) in stats.items() if pp == q]
print('in all: %d ticks (%d own, %d of reaped children)' % (sum(total), total[0], total[1]))
dev.close()
