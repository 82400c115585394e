# Where a print(1) call's time goes, hop by hop, with a build that hop_timestamps_patch.py instrumented:
#
#   VENV=<a venv> python3 worker/runner/testdata/hop_timestamps.py /tmp/codexec-ts require 150
#
# (require: sandboxed; off: not). It runs `codexec dev` over stdio with a data directory under /tmp, makes 30 calls
# of warm-up, then N sequential print(1) calls, and prints the median of each step to the next, joined per call
# with the client's own timestamps. The job's process writes its timestamps on its stderr (read from the result),
# the zygote on its own (the worker's log), Zygote.Run in a log line. STEPS="a b ..." picks the steps to print.
import json, os, re, statistics, subprocess, sys, time
exe, sb, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = '/tmp/exp-ts-%d' % os.getpid()
log = '/tmp/exp-ts-%s.log' % sb
env = dict(PATH=os.environ['PATH'], HOME='/root', CODEXEC_DATA_DIR=data, CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sb,
           CODEXEC_UID_DIR=data + '/uids', CODEXEC_LOG_LEVEL='warn', CODEXEC_VENV=os.environ['VENV'])
p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log,'w'), env=env)
def call(i, method, params):
    p.stdin.write((json.dumps({'jsonrpc':'2.0','id':i,'method':method,'params':params})+'\n').encode()); p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get('id') == i: return m
call(1, 'initialize', {'protocolVersion':'2025-03-26','capabilities':{},'clientInfo':{'name':'x','version':'0'}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); p.stdin.flush()
for i in range(30): call(100+i, 'tools/call', {'name':'execute_code','arguments':{'code':'print(1)'}})
time.sleep(0.5)
mark = os.path.getsize(log)
rows = []
for i in range(n):
    t0 = time.monotonic_ns()
    r = call(1000+i, 'tools/call', {'name':'execute_code','arguments':{'code':'print(1)'}})
    t1 = time.monotonic_ns()
    err = r['result']['structuredContent']['stderr']
    m = re.search(r'TSJ (.*)', err)
    d = dict(kv.split('=') for kv in m.group(1).split())
    d = {k: int(v) for k, v in d.items()}
    d['c_send'] = t0; d['c_recv'] = t1
    rows.append(d)
    time.sleep(float(os.environ.get('GAP', '0.02')))
p.stdin.close(); p.wait()
text = open(log).read()[mark:]
tsz = [dict((k, int(v)) for k, v in (kv.split('=') for kv in m.split())) for m in re.findall(r'TSZ ([^"\n]*)', text)]
tsg = [dict(send=int(a), exited=int(b), ret=int(c)) for a, b, c in re.findall(r'msg=TSG .*?send=(\d+) exited=(\d+) ret=(\d+)', text)]
# correlate by time: each row gets the TSG whose send lies between c_send and c_recv
for d in rows:
    for g in tsg:
        if d['c_send'] < g['send'] < d['c_recv']:
            d.update(g_send=g['send'], g_exited=g['exited'], g_ret=g['ret'])
    for z in tsz:
        if 'z_recv' in z and d['c_send'] < z['z_recv'] < d['c_recv']:
            zz = dict(z)
            # the last z_sigchld before z_finish
            d.update(zz)
rows = [d for d in rows if 'g_send' in d and 'z_recv' in d and 'z_finish' in d]
steps = [x for x in os.environ.get('STEPS','c_send g_send z_recv z_handed j_recv s_fds c_binds c_detach c_cgroups s_confine s_closefds s_envrl s_drop j_setup j_richout j_read j_exec j_execd j_end z_sigchld z_finish z_exited_sent g_exited g_ret c_recv').split()]
print('%s: n=%d' % (sb, len(rows)))
for a, b in zip(steps, steps[1:]):
    v = [(d[b]-d[a])/1e6 for d in rows if a in d and b in d]
    print('  %-14s -> %-14s p50 %7.3f ms' % (a, b, statistics.median(v)))
print('  total round trip p50 %.3f ms' % statistics.median([(d['c_recv']-d['c_send'])/1e6 for d in rows]))
