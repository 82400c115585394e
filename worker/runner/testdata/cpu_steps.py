# Where a job's process spends its CPU before the job's code runs, step by step: `codexec dev` built with
# cpu_steps_patch.py, print(1) over stdio, N calls from C callers; prints, per step, the median CPU time (µs, user
# and system) of the job's process, for each sandbox mode named (default: require, then off). VENV is the
# interpreter's venv. Data goes under DATA (default /var/tmp: under /tmp each sandboxed spare would bind back what
# lies there over its fresh /tmp, which the default data directory does not need; VENV likewise).
#
#     VENV=... C=1 N=100 python3 worker/runner/testdata/cpu_steps.py /tmp/codexec-cpu require off
import collections, json, os, statistics, subprocess, sys, threading

exe = sys.argv[1]
modes = sys.argv[2:] or ['require', 'off']
C = int(os.environ.get('C', '1')); N = int(os.environ.get('N', '100'))


def measure(sb):
    data = '%s/cpu-steps-%s-%d' % (os.environ.get('DATA', '/var/tmp'), sb, os.getpid())
    env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data,
               CODEXEC_UID_DIR=data + '/uids', CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sb,
               CODEXEC_VENV=os.environ['VENV'])
    p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    lock, waiters, nid = threading.Lock(), {}, [0]

    def reader():
        for line in p.stdout:
            m = json.loads(line)
            if m.get('id') in waiters:
                waiters[m['id']][1] = m
                waiters[m['id']][0].set()

    threading.Thread(target=reader, daemon=True).start()

    def call(method, params):
        with lock:
            nid[0] += 1
            i, ev = nid[0], threading.Event()
            waiters[i] = [ev, None]
            p.stdin.write((json.dumps(dict(jsonrpc='2.0', id=i, method=method, params=params)) + '\n').encode())
            p.stdin.flush()
        ev.wait(60)
        return waiters.pop(i)[1]

    call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'cpu', 'version': '0'}})
    p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    p.stdin.flush()
    code = dict(name='execute_code', arguments=dict(code='print(1)'))
    for _ in range(10):
        call('tools/call', code)
    steps = collections.defaultdict(list)
    count = [0]

    def caller(n):
        for _ in range(n):
            err = call('tools/call', code)['result']['structuredContent'].get('stderr', '')
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
    p.stdin.close()
    p.wait(30)
    print('sandbox %s, %d callers, %d jobs: CPU of the job\'s process, µs, median (steps nest)' % (sb, C, count[0]))
    for name, v in sorted(steps.items(), key=lambda kv: -statistics.median(kv[1])):
        # A step a job did not take counts as 0 for it.
        print('  %-32s %7.0f' % (name, statistics.median(v + [0] * (count[0] - len(v)))))


for sb in modes:
    measure(sb)
