# Minor page faults per job of each process under a `codexec dev` server: the server, its sandbox launchers, the
# zygote (minflt) and what the zygote forked and reaped (cminflt: spares, jobs, the small inits), over N print(1)
# calls after 20 of warm-up, C at a time (default 1: sequential). A fault is a copy-on-write copy or a page mapped
# again after a fork, about 2 µs of CPU each on the 2-core development machine.
#
#     VENV=... C=8 python3 worker/runner/testdata/fault_counts.py bin/codexec require 400
import json, os, subprocess, sys, time

exe, sb, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
C = int(os.environ.get('C', '1'))
data = '/tmp/codexec-faults-%d' % os.getpid()
env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data, CODEXEC_EXEC_MODE='zygote',
           CODEXEC_SANDBOX=sb, CODEXEC_UID_DIR=data + '/uids', CODEXEC_LOG_LEVEL='warn', CODEXEC_VENV=os.environ['VENV'])
p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
nid = 0


def send(method, params):
    global nid
    nid += 1
    p.stdin.write((json.dumps({'jsonrpc': '2.0', 'id': nid, 'method': method, 'params': params}) + '\n').encode())
    return nid


def calls(m):
    ids = {send('tools/call', {'name': 'execute_code', 'arguments': {'code': 'print(1)'}}) for _ in range(m)}
    p.stdin.flush()
    while ids:
        ids.discard(json.loads(p.stdout.readline()).get('id'))


def tree():
    kids, stats = {}, {}
    for d in os.listdir('/proc'):
        if d.isdigit():
            try:
                f = open('/proc/%s/stat' % d).read()
            except OSError:
                continue
            rest = f.rsplit(')', 1)[1].split()
            kids.setdefault(int(rest[1]), []).append(int(d))
            stats[int(d)] = (f[f.index('(') + 1:f.rindex(')')], int(rest[7]), int(rest[8]))
    out, todo = {}, [(p.pid, 0)]
    while todo:
        q, depth = todo.pop()
        out[q] = (depth,) + stats[q]
        todo.extend((k, depth + 1) for k in kids.get(q, ()))
    return out


ident = send('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'faults', 'version': '0'}})
p.stdin.flush()
while json.loads(p.stdout.readline()).get('id') != ident:
    pass
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
for _ in range(20):
    calls(1)
time.sleep(0.5)
before = tree()
for _ in range(n // C):
    calls(C)
time.sleep(0.5)
after = tree()
for pid, (depth, comm, flt, cflt) in sorted(after.items(), key=lambda kv: kv[1][0]):
    if pid in before:
        print('%s%-16s pid %-7d minflt/job %7.1f  cminflt/job %7.1f' % (
            '  ' * depth, comm, pid, (flt - before[pid][2]) / n, (cflt - before[pid][3]) / n))
p.stdin.close()
p.wait()
