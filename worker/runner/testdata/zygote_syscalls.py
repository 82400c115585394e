# The zygote's own system calls per job: `codexec dev` over stdio, print(1), 20 calls to warm it, then `perf trace
# -s` on the zygote (the python process under the server's sandbox launcher) over N sequential calls; prints each
# call's total time per job, the largest first. Needs root and perf. VENV is the interpreter's venv; data under DATA
# (default /var/tmp).
#
#     VENV=... N=100 python3 worker/runner/testdata/zygote_syscalls.py bin/codexec [require|off]
import collections, os, re, subprocess, sys, tempfile, time

import devrpc

exe = sys.argv[1]
sb = sys.argv[2] if len(sys.argv) > 2 else 'require'
N = int(os.environ.get('N', '100'))
dev = devrpc.Dev(exe, sb, os.environ['VENV'], '%s/zygote-syscalls-%d' % (os.environ.get('DATA', '/var/tmp'), os.getpid()))
p = dev.p


def descendants(root):
    parent = {}
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                parent[int(d)] = int(open('/proc/%s/stat' % d).read().rsplit(')', 1)[1].split()[1])
            except (OSError, IndexError):
                pass
    out, todo = [], [root]
    while todo:
        q = todo.pop()
        kids = [c for c, pp in parent.items() if pp == q]
        out += kids
        todo += kids
    return out


for _ in range(20):
    dev.run('print(1)')
# The zygote: the oldest interpreter among the server's descendants (spares and jobs are forked from it later).
zygote = min(c for c in descendants(p.pid) if open('/proc/%d/comm' % c).read().startswith('python'))
out = tempfile.mktemp(prefix='zygote-syscalls-')
tr = subprocess.Popen(['perf', 'trace', '-s', '-p', str(zygote), '-o', out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(2)
for _ in range(N):
    dev.run('print(1)')
tr.send_signal(2)
tr.wait()
dev.close()
# perf trace -s: per process, a table of syscall, calls, errors, total (msec), ...; the zygote's is the first.
text = open(out).read()
os.unlink(out)
blocks = re.split(r'\n (\S+) \((\d+)\), \d+ events', text)
per = collections.Counter()
calls = collections.Counter()
for i in range(1, len(blocks), 3):
    if int(blocks[i + 1]) != zygote:
        continue
    for m in re.finditer(r'^\s+(\w+)\s+(\d+)\s+\d+\s+([\d.]+)', blocks[i + 2], re.M):
        per[m.group(1)] += float(m.group(3))
        calls[m.group(1)] += int(m.group(2))
waits = {'poll', 'ppoll', 'recvmsg', 'wait4', 'waitid', 'rt_sigtimedwait', 'read', 'futex', 'select', 'epoll_wait'}
print('the zygote (pid %d), sandbox %s, %d calls: its system calls, µs per job (waits left out: %s)' % (zygote, sb, N, ', '.join(sorted(waits))))
for name, ms in per.most_common():
    if name not in waits:
        print('  %-20s %6d calls  %8.1f' % (name, calls[name], ms * 1000 / N))
