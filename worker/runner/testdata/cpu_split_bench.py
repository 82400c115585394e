# Where a `codexec dev` server's CPU goes per `print(1)` job: its own process (Go: MCP, dispatch, the worker's
# set-up and result) and each kind of process under it (the zygote and the jobs it reaped, bubblewrap), from
# /proc/PID/stat (utime and stime, plus cutime and cstime of the children they reaped), while C callers (default
# 8) call it for D seconds (default 8). Servers are measured one after the other, in the order given
# (LABEL=EXE:SANDBOX, SANDBOX off or require); give each twice, alternating, on a shared machine. VENV as for
# alternate_dev_bench.py, whose client this reuses.
#
#     VENV=... python3 worker/runner/testdata/cpu_split_bench.py off=bin/codexec:off on=bin/codexec:require \
#         off=bin/codexec:off on=bin/codexec:require
import os
import sys
import threading
import time

# alternate_dev_bench.py's server and client (everything before its own runs).
_src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'alternate_dev_bench.py')).read()
exec(compile(_src[:_src.index('srvs = []')], 'alternate_dev_bench.py', 'exec'))
C = int(os.environ.get('C', '8'))
D = float(os.environ.get('D', '8'))


def processes():
    """pid -> (parent, name, [utime, stime, cutime, cstime]) of every process."""
    out = {}
    for p in os.listdir('/proc'):
        if p.isdigit():
            try:
                st = open('/proc/%s/stat' % p).read()
            except OSError:
                continue
            f = st[st.rindex(')') + 2:].split()
            out[int(p)] = (int(f[1]), st[st.index('(') + 1:st.rindex(')')], [int(x) for x in f[11:15]])
    return out


def cpu(root):
    """Ticks of root itself, and per process name of everything under it."""
    procs = processes()
    kids = {}
    for p, (parent, _, _) in procs.items():
        kids.setdefault(parent, []).append(p)
    by_name, stack = {}, list(kids.get(root, []))
    own = sum(procs[root][2][:2]) if root in procs else 0
    while stack:
        p = stack.pop()
        by_name[procs[p][1]] = by_name.get(procs[p][1], 0) + sum(procs[p][2])
        stack.extend(kids.get(p, []))
    return own, by_name


for arg in sys.argv[1:]:
    label, rest = arg.split('=', 1)
    exe, sb = rest.rsplit(':', 1)
    s = Srv(label, exe, sb)  # noqa: F821 (alternate_dev_bench.py's)
    for _ in range(30):
        s.ex()
    time.sleep(1)
    own0, names0 = cpu(s.p.pid)
    stop, count, lock = time.monotonic() + D, [0], threading.Lock()

    def loop():
        while time.monotonic() < stop:
            s.ex()
            with lock:
                count[0] += 1
    threads = [threading.Thread(target=loop) for _ in range(C)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    own1, names1 = cpu(s.p.pid)
    n = count[0]
    tick = 1000.0 / os.sysconf('SC_CLK_TCK') / n  # ms per job per tick
    parts = ' '.join('%s %.2f' % (k, (names1.get(k, 0) - names0.get(k, 0)) * tick)
                     for k in sorted(set(names0) | set(names1)) if names1.get(k, 0) != names0.get(k, 0))
    print('%-10s %d callers, %d jobs: ms of CPU per job: server %.2f, %s' % (label, C, n, (own1 - own0) * tick, parts))
    s.close()
