# deploy/gpu-check-dev.py: check GPU jobs through `codexec dev` on a machine
# with an NVIDIA GPU and a virtual environment holding a CUDA build of
# PyTorch, with nothing else (no Go, Redis, NATS or network: see
# deploy/gpu-check.sh for the cluster's check). It drives `codexec dev` over
# stdio with plain JSON-RPC, and prints what each call answered: a job asking
# for one GPU (devices seen, a matrix product, peak memory), the same with
# memory_mb 8192, requests that cannot be met, a job without a GPU, two GPU
# jobs at once, a job past the memory limit, a fork loop against procs, the
# job's cgroup, and 30 calls of print(1). The server's log goes to
# OUTDIR/dev-SANDBOX.log. Run as root:
#
#     python3 deploy/gpu-check-dev.py EXE require /opt/torch/.venv /tmp/out
import json, os, subprocess, sys, threading, time
exe, sandbox, venv, out = sys.argv[1:5]
data = '/tmp/cx-%s' % sandbox
env = dict(os.environ, CODEXEC_DATA_DIR=data, CODEXEC_SANDBOX=sandbox, CODEXEC_LOG_LEVEL='debug',
           CODEXEC_VENV=venv, CODEXEC_UID_DIR=data + '/uids', HOME='/root')
log = open('%s/dev-%s.log' % (out, sandbox), 'w')
p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env)
lock = threading.Lock(); waiters = {}; nid = [0]
def reader():
    for line in p.stdout:
        try:
            m = json.loads(line)
        except Exception:
            continue
        if 'id' in m and m['id'] in waiters:
            waiters[m['id']].append(m)
threading.Thread(target=reader, daemon=True).start()
def call(method, params, timeout=240):
    with lock:
        nid[0] += 1; i = nid[0]; waiters[i] = []
    p.stdin.write((json.dumps({'jsonrpc': '2.0', 'id': i, 'method': method, 'params': params}) + '\n').encode()); p.stdin.flush()
    t = time.time()
    while not waiters[i]:
        if time.time() - t > timeout or p.poll() is not None:
            return {'error': 'no answer (server exited: %s)' % p.poll()}
        time.sleep(0.01)
    return waiters[i][0]
def tool(args, label):
    t = time.time()
    r = call('tools/call', {'name': 'execute_code', 'arguments': args})
    dt = (time.time() - t) * 1000
    res = r.get('result') or {}
    sc = res.get('structuredContent') or {}
    print('=== %s (%.0f ms) isError=%s status=%s' % (label, dt, res.get('isError'), sc.get('status')))
    print('stdout:', (sc.get('stdout') or '').strip()[:2000])
    if sc.get('stderr'): print('stderr:', sc['stderr'].strip()[-1500:])
    if sc.get('message'): print('message:', sc['message'][:1500])
    if sc.get('gpu'): print('gpu:', json.dumps(sc['gpu']))
    if 'error' in r: print('error:', r['error'])
    sys.stdout.flush()
    return sc
r = call('initialize', {'protocolVersion': '2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 'gpucheck', 'version': '0'}}, timeout=120)
print('initialize:', 'ok' if 'result' in r else r)
if 'result' not in r:
    sys.exit(1)
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'); p.stdin.flush()
probe = r'''import os, sys, time, subprocess
t = time.time()
import torch
n = torch.cuda.device_count()
a = torch.ones(4096, 4096, device='cuda')
ok = (a @ a).sum().item() == 4096.0 ** 3
torch.cuda.synchronize()
x = torch.empty(int(2 * 2**30), dtype=torch.uint8, device='cuda')  # 2 GiB, for the peak memory
torch.cuda.synchronize()
print('uid', os.getuid(), 'devices', n, 'product_ok', ok, 'name', torch.cuda.get_device_name(0))
print('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'), 'NVIDIA_VISIBLE_DEVICES', os.environ.get('NVIDIA_VISIBLE_DEVICES'))
print('/dev:', ' '.join(sorted(d for d in os.listdir('/dev') if d.startswith('nvidia'))))
print('/proc/driver/nvidia/gpus:', os.listdir('/proc/driver/nvidia/gpus') if os.path.isdir('/proc/driver/nvidia/gpus') else None)
print('seconds %.2f' % (time.time() - t))
time.sleep(1.5)
'''
tool({'code': probe, 'gpu': {'count': 1}, 'timeout_seconds': 200}, 'one GPU')
tool({'code': probe, 'gpu': {'count': 1}, 'timeout_seconds': 200, 'limits': {'memory_mb': 8192}}, 'one GPU, memory_mb 8192')
tool({'code': 'print(1)', 'gpu': {'count': 2}}, 'two GPUs (one on this machine: refused)')
tool({'code': 'print("big enough")', 'gpu': {'model': 'h200', 'min_memory_mb': 100000}}, 'model h200, 100000 MiB')
tool({'code': 'print(1)', 'gpu': {'model': 'a100'}}, 'model a100 (refused)')
tool({'code': r'''import os
print('no gpu asked: /dev nvidia nodes', sorted(d for d in os.listdir('/dev') if d.startswith('nvidia')), 'CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))
import torch
print('cuda available', torch.cuda.is_available())''', 'timeout_seconds': 120}, 'no GPU asked')
# Two at once on one GPU: the second waits for the device.
res = [None, None]
def two(i):
    res[i] = call('tools/call', {'name': 'execute_code', 'arguments': {'code': 'import torch, time; torch.ones(1, device="cuda"); time.sleep(2); print("done")', 'gpu': {'count': 1}, 'timeout_seconds': 200}})
ts = [threading.Thread(target=two, args=(i,)) for i in range(2)]
[t.start() for t in ts]; [t.join() for t in ts]
for r in res:
    sc = ((r or {}).get('result') or {}).get('structuredContent') or {}
    print('=== concurrent: status', sc.get('status'), 'stdout', (sc.get('stdout') or '').strip(), 'gpu', json.dumps(sc.get('gpu')))
tool({'code': 'x = bytearray(3 * 2**30); print(len(x))', 'timeout_seconds': 60}, 'past the 1 GiB memory limit')
tool({'code': 'import os\nfor i in range(400):\n    try:\n        if os.fork() == 0:\n            import time; time.sleep(5); os._exit(0)\n    except OSError as e:\n        print("fork", i, "refused:", e); break', 'timeout_seconds': 60}, 'fork 400 (procs 256)')
tool({'code': 'print(open("/proc/self/cgroup").read())', 'timeout_seconds': 60}, 'its cgroup')
t = time.time(); n = 0
lat = []
for i in range(30):
    t0 = time.time(); call('tools/call', {'name': 'execute_code', 'arguments': {'code': 'print(1)'}}); lat.append((time.time() - t0) * 1000)
lat.sort(); print('print(1) x30 on this machine: p50 %.2f ms' % lat[15])
p.stdin.close()
try:
    p.wait(20)
except Exception:
    p.kill()
