# A worker holding many sessions: `codexec dev --http` on a fresh data directory, N sessions made that each run
# one print(1) (each session's file system is mounted on the worker from then on), then C callers, each in a
# session of its own, calling print(1) for D seconds. Prints the calls per second, and the sizes of the mount
# tables of the server's processes once the N sessions are made (the zygote's and its spares' among them). SB is
# --sandbox (default auto), DATA where the data directory goes, VENV the interpreter's venv. Raw JSON-RPC over HTTP
# (urllib).
#
#     VENV=... N=60 python3 worker/testdata/sessions_http_bench.py bin/codexec
import json, os, socket, subprocess, sys, threading, time, urllib.request

exe = sys.argv[1]
N = int(os.environ.get('N', '60')); C = int(os.environ.get('C', '8')); D = float(os.environ.get('D', '6'))
s = socket.socket(); s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]; s.close()
data = '%s/h-%d' % (os.environ.get('DATA', '/var/tmp/codexec-bench'), os.getpid())
env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data,
           CODEXEC_VENV=os.environ['VENV'], CODEXEC_SANDBOX=os.environ.get('SB', 'auto'))
p = subprocess.Popen([exe, 'dev', '--http', '127.0.0.1:%d' % port], env=env, stderr=subprocess.DEVNULL)
url = 'http://127.0.0.1:%d/mcp' % port


def post(body, sid=None):
    h = {'Content-Type': 'application/json', 'Accept': 'application/json, text/event-stream'}
    if sid:
        h['Mcp-Session-Id'] = sid
    r = urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), h), timeout=60)
    return r.headers.get('Mcp-Session-Id'), r.read()


def session():
    sid, _ = post({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', 'params': {
        'protocolVersion': '2025-06-18', 'capabilities': {}, 'clientInfo': {'name': 'bench', 'version': '0'}}})
    post({'jsonrpc': '2.0', 'method': 'notifications/initialized'}, sid)
    return sid


def call(sid):
    _, b = post({'jsonrpc': '2.0', 'id': 2, 'method': 'tools/call',
                 'params': {'name': 'execute_code', 'arguments': {'code': 'print(1)'}}}, sid)
    if b'"status":"ok"' not in b:
        raise SystemExit('call failed: %r' % b[:300])


try:
    for _ in range(150):
        try:
            post({'jsonrpc': '2.0', 'id': 0, 'method': 'ping'})
            break
        except OSError:
            time.sleep(0.2)
    for _ in range(N):
        call(session())
    kids, todo, sizes = {}, [p.pid], []
    for q in os.listdir('/proc'):
        try:
            if q.isdigit():
                kids.setdefault(int(open('/proc/%s/stat' % q).read().rsplit(')', 1)[1].split()[1]), []).append(int(q))
        except OSError:
            pass
    while todo:
        q = todo.pop()
        todo.extend(kids.get(q, ()))
        try:
            sizes.append(len(open('/proc/%d/mountinfo' % q).read().splitlines()))
        except OSError:
            pass
    print('mount tables of the server and its processes: %s' % sorted(set(sizes)))
    sids = [session() for _ in range(C)]
    for sid in sids:
        call(sid)
    count, stop = [0], time.time() + D

    def caller(sid):
        while time.time() < stop:
            call(sid)
            count[0] += 1
    threads = [threading.Thread(target=caller, args=(sid,)) for sid in sids]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print('%s, %d sessions held: %d callers, %.1f calls/s' % (exe, N, C, count[0] / (time.time() - t0)))
finally:
    p.terminate()
    p.wait(30)
