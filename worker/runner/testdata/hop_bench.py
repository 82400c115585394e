# What one hop of the zygote's protocol costs: a datagram on an AF_UNIX
# SOCK_SEQPACKET socket pair to a process asleep in recv (the zygote's
# hand-off to its spare, the spare's report to the zygote), timed as half
# a round trip, and the JSON a hop carries: a run request of a typical size
# decoded, an `exited` message encoded. Medians of N (default 2000) after
# 200 of warm-up, in microseconds.
#
#     python3 worker/runner/testdata/hop_bench.py
import json, os, socket, statistics, time

N = int(os.environ.get('N', '2000'))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
pid = os.fork()
if pid == 0:
    a.close()
    while True:
        m = b.recv(1 << 16)
        if not m:
            os._exit(0)
        b.send(m)
b.close()
rtt = []
for i in range(N + 200):
    time.sleep(0.0005)  # let the peer fall asleep, as a spare waiting for its job does
    t0 = time.perf_counter_ns()
    a.send(b'x' * 64)
    a.recv(1 << 16)
    if i >= 200:
        rtt.append(time.perf_counter_ns() - t0)
a.close()
os.waitpid(pid, 0)
req = json.dumps({'op': 'run', 'id': 7, 'script': '/data/scripts/s/job.py', 'dir': '/data/sessions/s',
                  'env': ['VAR%d=%s' % (i, 'v' * 40) for i in range(30)], 'rlimits': [[i, 1 << 20, 1 << 20] for i in range(6)],
                  'confine': {'uid': 2000000001, 'gid': 2000000001, 'binds': [['/data/sessions/s', True], ['/data/scripts/s', False]],
                              'cgroups': ['/sys/fs/cgroup/memory/codexec/job-1/cgroup.procs'], 'unmount': ['/sys/fs/cgroup/memory/codexec'],
                              'tmp_size': 1 << 30, 'session': 's'}}).encode()
dec, enc = [], []
for i in range(N):
    t0 = time.perf_counter_ns(); json.loads(req); t1 = time.perf_counter_ns()
    json.dumps({'op': 'exited', 'id': 7, 'status': 0}, separators=(',', ':')).encode(); t2 = time.perf_counter_ns()
    dec.append(t1 - t0); enc.append(t2 - t1)
print('one hop to a sleeping process (half a round trip): p50 %.0f us, p90 %.0f us' % (statistics.median(rtt) / 2000, sorted(rtt)[int(N * .9)] / 2000))
print('run request of %d bytes decoded: p50 %.0f us; exited encoded: p50 %.0f us' % (len(req), statistics.median(dec) / 1000, statistics.median(enc) / 1000))
