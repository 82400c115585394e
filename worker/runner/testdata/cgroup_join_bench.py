# What joining cgroup v1 hierarchies costs a single-threaded process: "0" written
# to cgroup.procs (the whole thread group: cgroup_threadgroup_rwsem taken for
# writing, an RCU grace period) against "0" written to tasks (the calling
# thread alone), alternately, in a forked child each time. Root, cgroup v1
# with memory and pids mounted under /sys/fs/cgroup; makes and removes a
# cgroup "cgwtest" in each.
#
#     python3 worker/runner/testdata/cgroup_join_bench.py
import os, time, statistics as st, sys
base = '/sys/fs/cgroup/%s/cgwtest'
for c in ('memory', 'pids'):
    os.makedirs(base % c, exist_ok=True)
res = {'cgroup.procs': [], 'tasks': []}
for i in range(60):
    for f in (('cgroup.procs', 'tasks') if i % 2 else ('tasks', 'cgroup.procs')):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            t0 = time.monotonic_ns()
            for c in ('memory', 'pids'):
                with open(os.path.join(base % c, f), 'w') as fh: fh.write('0')
            os.write(w, b'%d' % (time.monotonic_ns() - t0)); os._exit(0)
        os.close(w); d = int(os.read(r, 64)); os.close(r); os.waitpid(pid, 0)
        res[f].append(d / 1e6)
        time.sleep(0.02)
for f, v in res.items(): print(f, 'p50 %.3f ms p90 %.3f' % (st.median(v), sorted(v)[len(v) * 9 // 10]))
for c in ('memory', 'pids'): os.rmdir(base % c)
