# Side by side: several `codexec dev` servers over stdio (LABEL=EXE:SANDBOX, SANDBOX off or require, exec mode
# zygote), print(1) through execute_code. Each of R rounds makes N sequential calls alternating between the servers,
# then C callers for D seconds on each server in turn. Reports the sequential p50, and per server the median of the
# rounds' calls/s and of the Go process's CPU per call (utime+stime of the codexec process from /proc, so the
# interpreters' own CPU is not counted: what the Go side spends per call), and the CPU of the server and of all it
# runs per call ("all CPU": the interpreters and jobs too, reaped ones through their reapers' c-times; the client's
# is not counted; nor is a sandboxed job's keeper, which the dying init of its PID namespace reaps with SIGCHLD
# ignored, so that the kernel adds its CPU to no one's), and the whole machine's busy CPU per call less the client's
# ("machine CPU": everything, the keepers and the kernel's threads included, and any other work on the machine:
# meaningful on an idle one). With LVL=debug it also gives, for the
# sequential calls, the medians of where the time outside the job went, from the servers' `call timing`,
# `dispatched` and `job timing` debug lines (logs in /tmp/pg/LABEL.log). PROF=1 writes a Go CPU profile of each
# server to /tmp/pg/LABEL.prof (CODEXEC_CPU_PROFILE). DATA is where the servers' data directories go (default
# /tmp/pg: under /tmp, each sandboxed spare binds back what lies there over its fresh /tmp, and each job makes
# the way to its directories, which the default data directory, ~/.local/share/codexec, does not need; the
# venv likewise). VENV is the interpreter's venv (codexec bench prints the
# one it builds).
#
#     VENV=... LVL=debug N=100 C=8 D=4 R=4 python3 worker/testdata/dev_cpu_bench.py \
#         before=/tmp/codexec-before:off after=bin/codexec:off
import json, os, re, statistics, subprocess, sys, threading, time
N = int(os.environ.get('N', '100')); C = int(os.environ.get('C', '8')); D = float(os.environ.get('D', '3')); R = int(os.environ.get('R', '3'))
TCK = os.sysconf('SC_CLK_TCK')
os.makedirs('/tmp/pg', exist_ok=True)

class Srv:
    def __init__(self, label, exe, sb):
        self.label = label
        data = '%s/d-%s-%d' % (os.environ.get('DATA', '/tmp/pg'), label, os.getpid())
        env = dict(PATH=os.environ['PATH'], HOME='/root', CODEXEC_DATA_DIR=data, CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sb,
                   CODEXEC_UID_DIR=data + '/uids', CODEXEC_LOG_LEVEL=os.environ.get('LVL', 'info'), CODEXEC_VENV=os.environ['VENV'])
        if os.environ.get('PROF'):
            env['CODEXEC_CPU_PROFILE'] = '/tmp/pg/%s.prof' % label
        self.log = '/tmp/pg/%s.log' % label
        self.p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log, 'w'), env=env)
        self.lock = threading.Lock(); self.waiters = {}; self.nid = 0; self.seq_spans = []
        threading.Thread(target=self.reader, daemon=True).start()
        self.call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'cpu', 'version': '0'}})
        self.p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); self.p.stdin.flush()

    def cpu(self):
        f = open('/proc/%d/stat' % self.p.pid).read().rsplit(')', 1)[1].split()
        return (int(f[11]) + int(f[12])) * 1000.0 / TCK

    def tree_cpu(self):
        """CPU of the server and of everything it runs: utime, stime,
        cutime and cstime of it and of each live descendant (a process
        reaped counts in its reaper's c-times: jobs in their zygote's)."""
        kids, stats = {}, {}
        for p in os.listdir('/proc'):
            if p.isdigit():
                try:
                    f = open('/proc/%s/stat' % p).read().rsplit(')', 1)[1].split()
                except OSError:
                    continue
                kids.setdefault(int(f[1]), []).append(int(p))
                stats[int(p)] = f
        total, todo = 0, [self.p.pid]
        while todo:
            q = todo.pop()
            f = stats.get(q)
            if f:
                total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
            todo.extend(kids.get(q, ()))
        return total * 1000.0 / TCK

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

def breakdown(srv):
    """Medians of the sequential calls' parts outside the job, joined by job id."""
    text = open(srv.log).read()
    lines = [l for a, b in srv.seq_spans for l in text[a:b].splitlines()]
    fe, wk = {}, {}
    for l in lines:
        m = re.search(r'job=(\w+)', l)
        if not m:
            continue
        f = {k: float(v) for k, v in re.findall(r'(\w+_ms)=([\d.]+)', l)}
        if 'job timing' in l:
            wk[m.group(1)] = f
        elif 'call timing' in l or re.search(r'msg="?dispatched', l):
            fe.setdefault(m.group(1), {}).update(f)
    rows = []
    for j, f in fe.items():
        w = wk.get(j)
        if not w or 'total_ms' not in f or 'exec_ms' not in w:
            continue
        rows.append({
            'handler total': f['total_ms'], 'job (exec_ms)': w['exec_ms'], 'outside (total - exec)': f['total_ms'] - w['exec_ms'],
            'presence read (pool_ms)': f.get('pool_ms', 0), 'record and job sent (submit_ms)': f.get('submit_ms', 0),
            'to the claim won (queue_ms)': w['queue_ms'], 'of which delivery to claim (claim_ms)': w.get('claim_ms', float('nan')),
            'set-up (setup_ms)': w['setup_ms'], 'executor beyond the job (run_ms - exec_ms)': w['run_ms'] - w['exec_ms'],
            'result ready (post_ms)': w['post_ms'], 'result stored (store_ms)': w['store_ms'],
            'result to the frontend': f['total_ms'] - f['session_ms'] - w['queue_ms'] - w['setup_ms'] - w['run_ms'] - w['post_ms'] - w['store_ms'] - f['record_extra_ms'],
            'slot held after the result (ack_ms)': w['ack_ms']})
    return rows

srvs = []
for a in sys.argv[1:]:
    label, rest = a.split('=', 1); exe, sb = rest.rsplit(':', 1)
    srvs.append(Srv(label, exe, sb))
for s in srvs:
    for _ in range(30):
        s.ex()
seq = {s.label: [] for s in srvs}; rates = {s.label: [] for s in srvs}; cpus = {s.label: [] for s in srvs}; alls = {s.label: [] for s in srvs}
def machine_cpu():
    """The whole machine's busy CPU (ms: user, nice, system, irq, softirq from /proc/stat), less this client's own:
    what the server costs whatever process it fell to, a process released unreaped (a job's keeper, reaped by its
    dying namespace's init with SIGCHLD ignored, counts in no one's c-times) and the kernel's threads included, and
    whatever else runs on the machine too (meaningful on an idle one only)."""
    f = open('/proc/stat').readline().split()
    busy = sum(int(x) for x in (f[1], f[2], f[3], f[6], f[7]))
    t = os.times()
    return busy * 1000.0 / TCK - (t.user + t.system) * 1000.0


machs = {s.label: [] for s in srvs}
for r in range(R):
    marks = {s.label: os.path.getsize(s.log) for s in srvs}
    for i in range(N):
        for s in (srvs if i % 2 == 0 else srvs[::-1]):
            t0 = time.perf_counter(); s.ex(); seq[s.label].append((time.perf_counter() - t0) * 1000)
    time.sleep(0.2)  # the last calls' debug lines
    for s in srvs:
        s.seq_spans.append((marks[s.label], os.path.getsize(s.log)))
    if C == 0:
        continue
    for s in (srvs if r % 2 == 0 else srvs[::-1]):
        stop = time.monotonic() + D; cnt = [0]; lk = threading.Lock()
        def loop():
            while time.monotonic() < stop:
                s.ex()
                with lk:
                    cnt[0] += 1
        th = [threading.Thread(target=loop) for _ in range(C)]
        c0 = s.cpu(); a0 = s.tree_cpu(); m0 = machine_cpu(); t0 = time.monotonic(); [t.start() for t in th]; [t.join() for t in th]
        el = time.monotonic() - t0; c1 = s.cpu()
        time.sleep(0.3)  # the last jobs' processes reaped
        a1 = s.tree_cpu(); m1 = machine_cpu()
        rates[s.label].append(cnt[0] / el); cpus[s.label].append((c1 - c0) / cnt[0]); alls[s.label].append((a1 - a0) / cnt[0])
        machs[s.label].append((m1 - m0) / cnt[0])
for s in srvs:
    v = seq[s.label]
    line = '%-12s sequential p50 %6.2f ms p90 %6.2f (n=%d)' % (s.label, statistics.median(v), sorted(v)[int(len(v) * .9)], len(v))
    if C:
        line += ' | %d callers: %6.1f calls/s (%s), Go CPU per call %5.2f ms (%s), all CPU per call %5.2f ms (%s), machine CPU per call %5.2f ms (%s)' % (
            C, statistics.median(rates[s.label]), ' '.join('%.0f' % x for x in rates[s.label]),
            statistics.median(cpus[s.label]), ' '.join('%.2f' % x for x in cpus[s.label]),
            statistics.median(alls[s.label]), ' '.join('%.2f' % x for x in alls[s.label]),
            statistics.median(machs[s.label]), ' '.join('%.2f' % x for x in machs[s.label]))
    print(line)
if os.environ.get('LVL') == 'debug':
    tables = {s.label: breakdown(s) for s in srvs}
    keys = next((list(t[0]) for t in tables.values() if t), [])
    print('%-45s' % 'sequential, p50 ms' + ''.join('%14s' % s.label for s in srvs))
    for k in keys:
        print('%-45s' % k + ''.join('%14.3f' % statistics.median([r[k] for r in tables[s.label]]) if tables[s.label] else '%14s' % '-' for s in srvs))
for s in srvs:
    s.close()
