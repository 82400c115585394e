package main

import (
	"testing"
)

// caseSystemCalls: the calls a Python job never needs, and that widen what
// the kernel exposes to it, fail with EPERM (the jobs' seccomp filter,
// worker/seccomp). First a user namespace, which would hold every
// capability; then, with whatever that gave, mounts, raw, packet, vsock
// and netfilter sockets, io_uring, native AIO (io_setup: its contexts are
// the whole host's), perf events, kernel keys, BPF, ptrace.
// Ordinary work (threads, a subprocess, a loopback connection, the
// interfaces through netlink) still runs.
func caseSystemCalls(t *testing.T, tg *secTarget, s *secSession) {
	s.confined(t, "refused system calls")
	code := `import ctypes, errno, json, os, socket, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
r = {}
def attempt(name, f):
    try:
        f()
        r[name] = 'ok'
    except OSError as e:
        r[name] = errno.errorcode.get(e.errno, str(e.errno))
def sc(nr, *args):
    if libc.syscall(ctypes.c_long(nr), *[a if isinstance(a, ctypes.Array) else ctypes.c_long(a) for a in args]) == -1:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
def lc(name, *args):
    if getattr(libc, name)(*args) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
# In a child: what unshare gives (today, a user namespace with every
# capability in it) must not change the parent's checks below.
rfd, wfd = os.pipe()
pid = os.fork()
if pid == 0:
    attempt('unshare user+mount+net', lambda: lc('unshare', 0x10000000 | 0x20000 | 0x40000000))
    attempt('setns', lambda: lc('setns', os.open('/proc/self/ns/net', os.O_RDONLY), 0))
    attempt('mount tmpfs', lambda: lc('mount', b'none', b'/tmp', b'tmpfs', ctypes.c_ulong(0), None))
    attempt('raw socket', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
    attempt('packet socket', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
    attempt('vsock', lambda: socket.socket(40, socket.SOCK_STREAM).close())
    attempt('netlink netfilter', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12).close())
    attempt('io_uring_setup', lambda: sc(425, 1, ctypes.create_string_buffer(120)))
    attempt('io_setup', lambda: sc(206, 65536, ctypes.create_string_buffer(8)))
    perf = ctypes.create_string_buffer(128)
    perf[4] = 128
    perf[40] = 0x60
    attempt('perf_event_open', lambda: sc(298, perf, 0, -1, -1, 0))
    attempt('add_key', lambda: sc(248, ctypes.create_string_buffer(b'user'), ctypes.create_string_buffer(b'k'),
                                   ctypes.create_string_buffer(b'v'), 1, -2))
    attempt('keyctl', lambda: sc(250, 0, -2, 1))
    bpf = ctypes.create_string_buffer(72)
    bpf[0], bpf[4], bpf[8], bpf[12] = 2, 4, 4, 1
    attempt('bpf', lambda: sc(321, 0, bpf, 72))
    attempt('ptrace traceme', lambda: sc(101, 0, 0, 0, 0))
    os.write(wfd, json.dumps(r).encode())
    os._exit(0)
os.close(wfd)
data = b''
while True:
    chunk = os.read(rfd, 65536)
    if not chunk:
        break
    data += chunk
os.waitpid(pid, 0)
r = json.loads(data)
ok = {}
t = threading.Thread(target=lambda: ok.__setitem__('thread', True))
t.start(); t.join()
ok['subprocess'] = subprocess.run([sys.executable, '-c', 'print(42)'], capture_output=True, text=True).stdout.strip() == '42'
srv = socket.create_server(('127.0.0.1', 0))
c = socket.create_connection(srv.getsockname())
ok['loopback'] = srv.accept()[0] is not None
ok['netlink route'] = 'lo' in [n for _, n in socket.if_nameindex()]
ok['filtered'] = 'Seccomp:\t2' in open('/proc/self/status').read()
print(json.dumps({'refused': r, 'works': ok}))
`
	res, er := s.run(t, code, nil)
	var out struct {
		Refused map[string]string
		Works   map[string]bool
	}
	lastJSON(t, res, er, &out)
	if len(out.Refused) != 14 {
		t.Errorf("%d calls tried, want 14: %v", len(out.Refused), out.Refused)
	}
	for call, got := range out.Refused {
		if got != "EPERM" {
			t.Errorf("%s: %s, want EPERM", call, got)
		}
	}
	for _, what := range []string{"thread", "subprocess", "loopback", "netlink route", "filtered"} {
		if !out.Works[what] {
			t.Errorf("%s: does not work under the filter (%v)", what, out.Works)
		}
	}
}
