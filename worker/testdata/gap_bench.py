# Sequential print(1) calls through `codexec dev` over stdio, back to back or with a pause between calls, and the
# medians of where the server's time went (from its debug lines): what a caller that pauses between calls (a model
# reading each answer) sees, against what a benchmark that calls back to back measures.
#
#     VENV=... python3 worker/testdata/gap_bench.py bin/codexec require 150 0 0.05 0 0.05
#
# EXE, SANDBOX (require or off), N calls per round, then the pause of each round in seconds, rounds run in order on
# one server. GOMAXPROCS, when set, is passed on. Columns: the client's round trip, the handler's total, the job's
# run (exec_ms), from the frontend's submit to the worker's delivery (the queue's hop: submit_at_ns and
# delivered_at_ns), the claim, the worker's set-up, the frontend's submit (record and job acknowledged), the
# result's store.
import json, os, re, statistics, subprocess, sys, time

exe, sb, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
gaps = [float(g) for g in sys.argv[4:]] or [0.0]
data = '/tmp/gap-bench-%d' % os.getpid()
log = data + '.log'
env = dict(PATH=os.environ['PATH'], HOME='/root', CODEXEC_DATA_DIR=data, CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sb,
           CODEXEC_UID_DIR=data + '/uids', CODEXEC_LOG_LEVEL='debug', CODEXEC_VENV=os.environ['VENV'])
if os.environ.get('GOMAXPROCS'):
    env['GOMAXPROCS'] = os.environ['GOMAXPROCS']
p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, 'w'), env=env)
nid = [0]


def call(method, params):
    nid[0] += 1
    p.stdin.write((json.dumps({'jsonrpc': '2.0', 'id': nid[0], 'method': method, 'params': params}) + '\n').encode())
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get('id') == nid[0]:
            return m


def ex():
    r = call('tools/call', {'name': 'execute_code', 'arguments': {'code': 'print(1)'}})
    assert '1' in json.dumps(r['result']), r


call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'gap', 'version': '0'}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
p.stdin.flush()
for _ in range(30):
    ex()
rounds = []
for gap in gaps:
    time.sleep(0.5)
    start = os.path.getsize(log)
    rt = []
    for _ in range(n):
        t0 = time.perf_counter()
        ex()
        rt.append((time.perf_counter() - t0) * 1000)
        if gap:
            time.sleep(gap)
    time.sleep(0.3)
    rounds.append((gap, rt, start, os.path.getsize(log)))
p.stdin.close()
p.wait()
text = open(log).read()
print('%-8s %-6s %6s %6s %6s %8s %6s %6s %6s %6s' % ('sandbox', 'pause', 'rt', 'total', 'exec', 'to-work', 'claim', 'setup', 'submit', 'store'))
for gap, rt, a, b in rounds:
    d = {}
    for line in text[a:b].splitlines():
        m = re.search(r'job=(\w+)', line)
        if m:
            for k, v in re.findall(r'(\w+_(?:ms|ns))=([\d.]+)', line):
                d.setdefault(m.group(1), {})[k] = float(v)
    rows = [v for v in d.values() if {'submit_at_ns', 'delivered_at_ns', 'exec_ms', 'total_ms'} <= v.keys()]
    med = lambda f: statistics.median(f(r) for r in rows)
    print('%-8s %-6g %6.2f %6.2f %6.2f %8.3f %6.3f %6.3f %6.3f %6.3f' % (
        sb, gap, statistics.median(rt), med(lambda r: r['total_ms']), med(lambda r: r['exec_ms']),
        med(lambda r: (r['delivered_at_ns'] - r['submit_at_ns']) / 1e6), med(lambda r: r['claim_ms']),
        med(lambda r: r['setup_ms']), med(lambda r: r['submit_ms']), med(lambda r: r['store_ms'])))
