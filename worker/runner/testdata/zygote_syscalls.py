# The zygote's own system calls per job: `codexec dev` over stdio, print(1), 20 calls to warm it, then `perf trace
# -s` on the zygote (the python process under the server's sandbox launcher) over N sequential calls; prints each
# call's total time per job, the largest first. Needs root and perf. VENV is the interpreter's venv; data under DATA
# (default /var/tmp).
#
#     VENV=... N=100 python3 worker/runner/testdata/zygote_syscalls.py bin/codexec [require|off]
import collections, json, os, re, subprocess, sys, tempfile, time

exe = sys.argv[1]
sb = sys.argv[2] if len(sys.argv) > 2 else 'require'
N = int(os.environ.get('N', '100'))
data = '%s/zygote-syscalls-%d' % (os.environ.get('DATA', '/var/tmp'), os.getpid())
env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data,
           CODEXEC_UID_DIR=data + '/uids', CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sb, CODEXEC_VENV=os.environ['VENV'])
p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
nid = [0]


def call(method, params):
    nid[0] += 1
    p.stdin.write((json.dumps(dict(jsonrpc='2.0', id=nid[0], method=method, params=params)) + '\n').encode())
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get('id') == nid[0]:
            return m


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


call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'sc', 'version': '0'}})
code = dict(name='execute_code', arguments=dict(code='print(1)'))
for _ in range(20):
    call('tools/call', code)
# The zygote: the oldest interpreter among the server's descendants (spares and jobs are forked from it later).
zygote = min(c for c in descendants(p.pid) if open('/proc/%d/comm' % c).read().startswith('python'))
out = tempfile.mktemp(prefix='zygote-syscalls-')
tr = subprocess.Popen(['perf', 'trace', '-s', '-p', str(zygote), '-o', out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(2)
for _ in range(N):
    call('tools/call', code)
tr.send_signal(2)
tr.wait()
p.stdin.close()
p.wait(30)
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
