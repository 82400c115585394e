# Side by side: several `codexec dev` servers over stdio (LABEL=EXE:SANDBOX, SANDBOX off or require, exec
# mode zygote), `print(1)` through execute_code alternating between them, so that the load of a shared machine
# falls on all of them alike. Sequential (C unset): N calls each, call by call. Concurrent: C callers for D
# seconds on one server, then the next, R rounds; the median of the rounds. A plain JSON-RPC client over the
# servers' stdin and stdout. LVL=debug keeps the servers' debug lines (call timing, job timing) in
# /tmp/pb/ab-LABEL.log. VENV is the interpreter's venv (codexec bench prints the one it builds).
#
#     VENV=... N=150 python3 worker/runner/testdata/alternate_dev_bench.py \
#         before-on=/tmp/codexec-before:require after-on=bin/codexec:require after-off=bin/codexec:off
import json, os, subprocess, sys, time, threading, statistics
N = int(os.environ.get('N', '200')); C = int(os.environ.get('C', '0')); D = float(os.environ.get('D', '3')); R = int(os.environ.get('R', '5'))
class Srv:
    def __init__(self, label, exe, sb):
        self.label = label
        os.makedirs('/tmp/pb', exist_ok=True)
        data = '/tmp/pb/ab-%s-%d' % (label, os.getpid())
        env = dict(PATH=os.environ['PATH'], HOME='/root', CODEXEC_DATA_DIR=data, CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sb,
                   CODEXEC_UID_DIR=data + '/uids', CODEXEC_LOG_LEVEL=os.environ.get('LVL', 'info'), CODEXEC_VENV=os.environ['VENV'])
        self.log = '/tmp/pb/ab-%s.log' % label
        self.p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, 'w'), env=env)
        self.lock = threading.Lock(); self.waiters = {}; self.nid = 0
        threading.Thread(target=self.reader, daemon=True).start()
        self.call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'ab', 'version': '0'}})
        self.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); self.p.stdin.flush()
    def reader(self):
        for line in self.p.stdout:
            m = json.loads(line)
            if 'id' in m and m['id'] in self.waiters:
                ev, box = self.waiters.pop(m['id']); box.append(m); ev.set()
    def call(self, method, params):
        with self.lock:
            self.nid += 1; i = self.nid
            ev = threading.Event(); box = []; self.waiters[i] = (ev, box)
            self.p.stdin.write((json.dumps({'jsonrpc': '2.0', 'id': i, 'method': method, 'params': params}) + '\n').encode()); self.p.stdin.flush()
        ev.wait(); return box[0]
    def ex(self):
        r = self.call('tools/call', {'name': 'execute_code', 'arguments': {'code': 'print(1)'}})
        assert '1' in json.dumps(r['result']), r
    def close(self):
        self.p.stdin.close(); self.p.wait()
srvs = []
for a in sys.argv[1:]:
    label, rest = a.split('=', 1); exe, sb = rest.rsplit(':', 1)
    srvs.append(Srv(label, exe, sb))
for s in srvs:
    for _ in range(30): s.ex()
if C == 0:
    ts = {s.label: [] for s in srvs}
    for i in range(N):
        for s in (srvs if i % 2 == 0 else srvs[::-1]):
            t0 = time.perf_counter(); s.ex(); ts[s.label].append((time.perf_counter() - t0) * 1000)
    for s in srvs:
        print('%-12s sequential print(1) p50 %6.2f ms  p90 %6.2f ms  (n=%d)' % (s.label, statistics.median(ts[s.label]), sorted(ts[s.label])[int(N * .9)], N))
else:
    rates = {s.label: [] for s in srvs}
    for r in range(R):
        for s in (srvs if r % 2 == 0 else srvs[::-1]):
            stop = time.monotonic() + D; cnt = [0]; lk = threading.Lock()
            def loop():
                while time.monotonic() < stop:
                    s.ex()
                    with lk: cnt[0] += 1
            th = [threading.Thread(target=loop) for _ in range(C)]
            t0 = time.monotonic(); [t.start() for t in th]; [t.join() for t in th]
            rates[s.label].append(cnt[0] / (time.monotonic() - t0))
    for s in srvs:
        v = sorted(rates[s.label])
        print('%-12s %d callers: median %6.1f calls/s  (%s)' % (s.label, C, v[len(v) // 2], ' '.join('%.1f' % x for x in v)))
for s in srvs: s.close()
