# Why the zygote rehearses a request after each fork (zygote.py: rehearse): the time to decode a run request and
# encode the answer, in a process with the default preloads, right after a fork (whose child waits) and with no
# fork since; with the argument "rehearse", the process goes through the request once between the fork and the
# measured run.
#
#     python3 worker/runner/testdata/cow_rehearse_bench.py; python3 worker/runner/testdata/cow_rehearse_bench.py rehearse
import os, time, json, statistics, sys, gc, socket, signal
for m in "json decimal email.message asyncio http.client urllib.request".split(): __import__(m)
gc.freeze(); gc.disable()
msg = json.dumps({'op':'run','id':21,'script':'/tmp/x/scripts/local/01M8YPVJVNKS93Q6PHA26BGRFK_script.py','dir':'/tmp/x/sessions/local/work','env':['PATH=/usr/bin','HOME=/tmp/x','LANG=C.UTF-8']*5,'rlimits':[[4,0,0],[0,600,601],[1,1<<30,1<<30]],'confine':{'uid':2000000000,'gid':2000000000,'binds':[['/tmp/x/sessions/local/work',True],['/tmp/x/scripts/local',False]],'cgroups':['/sys/fs/cgroup/memory/a/job-1/cgroup.procs']*3,'unmount':['/sys/fs/cgroup/memory/a']*3,'tmp_size':1<<31,'session':'local'}}).encode()
a, b = socket.socketpair()
def handle():
    req = json.loads(msg)
    c = req.get('confine')
    x = c.get('session'); t = time.monotonic()
    a.send(json.dumps({'op':'started','id':req['id'],'pid':1234}, separators=(',', ':')).encode())
    b.recv(100)
res = {'fork': [], 'nofork': []}
for i in range(200):
    for mode in ('fork', 'nofork'):
        pid = None
        if mode == 'fork':
            pid = os.fork()
            if pid == 0:
                signal.pause(); os._exit(0)
            if len(sys.argv) > 1:
                req = json.loads(msg); c = req.get('confine'); c.get('session'); time.monotonic()
                json.dumps({'op':'started','id':req['id'],'pid':1234}, separators=(',', ':')).encode()
        t = time.perf_counter_ns(); handle(); res[mode].append((time.perf_counter_ns()-t)/1e3)
        if pid:
            os.kill(pid, 9); os.waitpid(pid, 0)
for k, v in res.items(): print(k, 'p50 %.1f us' % statistics.median(v))
