# Where a sandboxed job's set-up goes, step by step: `codexec dev` built with setup_steps_patch.py, print(1) over
# stdio, N calls from C callers; prints the round trip's p50 and, per step, the p50 of when it ended (µs since the
# job's process had its request). VENV is the interpreter's venv, SB the sandbox mode (default require).
#
#     VENV=... C=1 N=200 python3 worker/runner/testdata/setup_steps.py /tmp/codexec-steps
import collections, json, os, statistics, subprocess, sys, threading, time

exe = sys.argv[1]
C = int(os.environ.get('C', '1')); N = int(os.environ.get('N', '200'))
data = '/tmp/setup-steps-%d' % os.getpid()
env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data,
           CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=os.environ.get('SB', 'require'), CODEXEC_VENV=os.environ['VENV'])
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


call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'steps', 'version': '0'}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
p.stdin.flush()
code = dict(name='execute_code', arguments=dict(code='print(1)'))
for _ in range(20):
    call('tools/call', code)
steps, rt = collections.defaultdict(list), []


def caller(n):
    for _ in range(n):
        t = time.perf_counter()
        r = call('tools/call', code)
        rt.append((time.perf_counter() - t) * 1000)
        for kv in r['result']['structuredContent'].get('stderr', '').split():
            name, _, v = kv.rpartition('=')
            if name:
                steps[name].append(float(v))


threads = [threading.Thread(target=caller, args=(N // C,)) for _ in range(C)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print('%d callers: round trip p50 %.2f ms' % (C, statistics.median(rt)))
for name, v in steps.items():
    print('  %-32s %6.0f us' % (name, statistics.median(v)))
p.stdin.close()
p.wait(30)
