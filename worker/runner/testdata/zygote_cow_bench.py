# What a forking process's own work between two forks costs in copy-on-write faults: a plain interpreter with the
# zygote's default preloads forks and reaps a child N times, doing in between nothing, a run request's json.loads
# and a reply's json.dumps (what the zygote did per job), json.loads with the reply formatted as bytes, and a
# struct-decoded header with the reply as bytes. Prints the parent's minor faults per cycle for each.
#
#     python3 worker/runner/testdata/zygote_cow_bench.py
import gc, json, os, resource, struct
import decimal, email.message, asyncio, http.client, urllib.request  # noqa: F401 (the default preloads)

N = 300
REQ = json.dumps({'op': 'run', 'id': 1, 'script': '/x/y.py', 'dir': '/w', 'env': ['A=%d' % i for i in range(30)],
                  'confine': {'session': 's', 'binds': [['/a', True]], 'unmount': ['/sys/fs/cgroup/x'] * 5,
                              'cgroups': ['/c/%d' % i for i in range(5)], 'uid': 1, 'gid': 1},
                  'rlimits': [[1, 2, 3]] * 8}).encode()
HEADER = struct.Struct('<BqB32s')
HDR = HEADER.pack(1, 12345, 0, b'abcdefabcdef0123456789')


def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def cycle(work):
    a = faults()
    for _ in range(N):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        work(pid)
        os.waitpid(pid, 0)
    return (faults() - a) / N


def nothing(pid):
    pass


def json_both(pid):
    req = json.loads(REQ)
    json.dumps({'op': 'started', 'id': req['id'], 'pid': pid}, separators=(',', ':')).encode()


def json_loads_bytes_reply(pid):
    req = json.loads(REQ)
    b'{"op":"started","id":%d,"pid":%d}' % (req['id'], pid)


def struct_header(pid):
    _, jid, _, _ = HEADER.unpack_from(HDR)
    b'{"op":"started","id":%d,"pid":%d}' % (jid, pid)


gc.disable()
gc.freeze()
for round in range(2):
    for work in (nothing, json_both, json_loads_bytes_reply, struct_header):
        print('round %d  %-24s parent faults per fork %6.1f' % (round + 1, work.__name__, cycle(work)))
