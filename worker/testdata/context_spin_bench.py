# What a session's contexts leave running between calls costs another call: a CPU-bound execute_code (a loop of
# three million additions, its wall time printed by the job; median of 5) through `codexec dev` over stdio, sandboxed,
# alone, then after two contexts each started four busy processes and answered.
#
#     VENV=... python3 worker/testdata/context_spin_bench.py bin/codexec
import json, os, statistics, subprocess, sys, time

exe = sys.argv[1]
data = '/tmp/codexec-spin-%d' % os.getpid()
env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data, CODEXEC_SANDBOX='require',
           CODEXEC_UID_DIR=data + '/uids', CODEXEC_LOG_LEVEL='warn')
if os.environ.get('VENV'):
    env['CODEXEC_VENV'] = os.environ['VENV']
p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
nid = 0


def call(method, params):
    global nid
    nid += 1
    p.stdin.write((json.dumps({'jsonrpc': '2.0', 'id': nid, 'method': method, 'params': params}) + '\n').encode())
    p.stdin.flush()
    while True:
        r = json.loads(p.stdout.readline())
        if r.get('id') == nid:
            return r


def tool(tool_name, **args):
    return call('tools/call', {'name': tool_name, 'arguments': args})['result']


JOB = 'import time\nw = time.perf_counter()\nx = 0\nfor i in range(3000000):\n    x += i\nprint(round((time.perf_counter() - w) * 1000))'
SPIN = ('import multiprocessing as m\ndef s():\n    while True:\n        pass\n'
        'ps = [m.Process(target=s, daemon=True) for _ in range(4)]\n[q.start() for q in ps]\nprint("spinning")')


def timed():
    return statistics.median(int(tool('execute_code', code=JOB)['content'][0]['text'].split('\n')[0]) for _ in range(5))


call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {}, 'clientInfo': {'name': 'spin', 'version': '0'}})
p.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
print('CPU-bound job alone: %d ms' % timed())
for k in range(2):
    tool('create_context', name='c%d' % k)
    tool('run_in_context', context_id='c%d' % k, code=SPIN)
time.sleep(1)
print('the same, two contexts with four busy processes each between calls: %d ms' % timed())
p.stdin.close()
p.wait()
