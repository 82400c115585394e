//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/codexec/codexec/worker/seccomp"
)

// hostileCallsJob tries what a job could do before jobs had a system-call
// filter: make a user namespace (and with it every capability, inside it),
// then, with whatever that gave, mount, open raw, packet, vsock and
// netfilter sockets, and call io_uring, perf events, kernel keys, BPF and
// ptrace. It prints each call's errno name, or "ok".
const hostileCallsJob = `
import ctypes, errno, json, os, socket
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
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWNET = 0x20000, 0x10000000, 0x40000000
if hasattr(os, 'unshare'):
    attempt('unshare', lambda: os.unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET))
else:
    attempt('unshare', lambda: sc(272, CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET))
def mount():
    if libc.mount(b'none', b'/tmp', b'tmpfs', ctypes.c_ulong(0), None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt('mount', mount)
attempt('raw', lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).close())
attempt('packet', lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close())
attempt('vsock', lambda: socket.socket(40, socket.SOCK_STREAM).close())
attempt('netfilter', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12).close())
attempt('io_uring_setup', lambda: sc(425, 1, ctypes.create_string_buffer(120)))
perf = ctypes.create_string_buffer(128)  # PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, user only
perf[4] = 128
perf[40] = 0x60
attempt('perf_event_open', lambda: sc(298, perf, 0, -1, -1, 0))
attempt('add_key', lambda: sc(248, ctypes.create_string_buffer(b'user'), ctypes.create_string_buffer(b'codexec'),
                               ctypes.create_string_buffer(b'secret'), 6, -2))
attempt('keyctl', lambda: sc(250, 0, -2, 1))
bpf_map = ctypes.create_string_buffer(72)  # BPF_MAP_TYPE_ARRAY, 4-byte keys and values, one entry
bpf_map[0], bpf_map[4], bpf_map[8], bpf_map[12] = 2, 4, 4, 1
attempt('bpf', lambda: sc(321, 0, bpf_map, 72))
attempt('ptrace', lambda: sc(101, 0, 0, 0, 0))
print(json.dumps(r))
`

// ordinaryJob does what ordinary Python does with processes, threads and
// sockets; it prints its results, and the filter state of its process.
const ordinaryJob = `
import asyncio, json, multiprocessing, os, socket, subprocess, sys, threading
def main():
    r = {}
    out = []
    ts = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    r['threads'] = sorted(out) == [0, 1, 2, 3]
    r['subprocess'] = subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip()
    r['posix_spawn'] = os.waitpid(os.posix_spawn('/bin/sh', ['sh', '-c', 'exit 3'], {}), 0)[1] >> 8
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    r['fork'] = os.waitpid(pid, 0)[1] >> 8
    srv = socket.create_server(('127.0.0.1', 0))
    c = socket.create_connection(srv.getsockname())
    a, _ = srv.accept()
    c.sendall(b'inet')
    r['inet'] = a.recv(4).decode()
    for s in (srv, c, a): s.close()
    u1, u2 = socket.socketpair()
    u1.sendall(b'unix')
    r['unix'] = u2.recv(4).decode()
    srv = socket.socket(socket.AF_UNIX)
    if os.path.exists('sock'):
        os.unlink('sock')
    srv.bind('sock')
    srv.listen()
    c = socket.socket(socket.AF_UNIX)
    c.connect('sock')
    r['unix_named'] = srv.accept()[0] is not None
    r['udp'] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM).fileno() > 2
    r['interfaces'] = [name for _, name in socket.if_nameindex()]
    r['getaddrinfo'] = sorted({ai[4][0] for ai in socket.getaddrinfo('localhost', 80, socket.AF_INET)})
    async def echo():
        server = await asyncio.start_server(lambda rd, wr: wr.write(b'async'), '127.0.0.1', 0)
        rd, wr = await asyncio.open_connection(*server.sockets[0].getsockname())
        data = await rd.read(5)
        wr.close()
        server.close()
        return data.decode()
    r['asyncio'] = asyncio.run(echo())
    with multiprocessing.Pool(2) as p:
        r['multiprocessing'] = p.map(abs, [-1, -2, -3])
    with multiprocessing.get_context('spawn').Pool(1) as p:
        r['multiprocessing_spawn'] = p.map(abs, [-4])
    status = open('/proc/self/status').read().splitlines()
    r['seccomp'] = [l.split()[1] for l in status if l.startswith('Seccomp:')][0]
    print(json.dumps(r))
if __name__ == '__main__':
    main()
`

func withSeccomp(t *testing.T, l *sandboxLayout) {
	t.Helper()
	prog, err := seccomp.Program(nil)
	if err != nil {
		t.Skip(err) // an architecture without a filter
	}
	l.cfg.Seccomp = prog
}

// Every hostile call fails with EPERM, through a warm zygote and through
// the one-shot sandboxed interpreter (spawn mode, and the first jobs of an
// environment).
func TestSandboxedJobsRunUnderTheSeccompFilter(t *testing.T) {
	l := newSandboxLayout(t)
	withSeccomp(t, l)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
	run := map[string]func(s Spec) Outcome{
		"zygote": func(s Spec) Outcome { return zrun(t, z, s) },
		"one-shot": func(s Spec) Outcome {
			out, err := RunSandboxed(context.Background(), l.cfg, s)
			if err != nil {
				t.Fatal(err)
			}
			return out
		},
	}
	for _, mode := range slices.Sorted(maps.Keys(run)) {
		t.Run(mode, func(t *testing.T) {
			out := run[mode](l.spec(t, "a", testUIDA, hostileCallsJob))
			if out.ExitCode != 0 {
				t.Fatalf("exit %d\nstdout: %s\nstderr: %s", out.ExitCode, out.Stdout, out.Stderr)
			}
			var r map[string]string
			if err := json.Unmarshal(out.Stdout, &r); err != nil {
				t.Fatalf("%q: %v (stderr %s)", out.Stdout, err, out.Stderr)
			}
			if len(r) != 12 {
				t.Errorf("%d calls tried, want 12: %v", len(r), r)
			}
			for call, got := range r {
				if got != "EPERM" {
					t.Errorf("%s: %s, want EPERM", call, got)
				}
			}

			out = run[mode](l.spec(t, "a", testUIDA, ordinaryJob))
			if out.ExitCode != 0 {
				t.Fatalf("ordinary Python failed: exit %d\nstdout: %s\nstderr: %s", out.ExitCode, out.Stdout, out.Stderr)
			}
			var o struct {
				Threads       bool     `json:"threads"`
				Subprocess    string   `json:"subprocess"`
				PosixSpawn    int      `json:"posix_spawn"`
				Fork          int      `json:"fork"`
				Inet          string   `json:"inet"`
				Unix          string   `json:"unix"`
				UnixNamed     bool     `json:"unix_named"`
				UDP           bool     `json:"udp"`
				Interfaces    []string `json:"interfaces"`
				GetAddrInfo   []string `json:"getaddrinfo"`
				Asyncio       string   `json:"asyncio"`
				Multi         []int    `json:"multiprocessing"`
				MultiSpawn    []int    `json:"multiprocessing_spawn"`
				SeccompStatus string   `json:"seccomp"`
			}
			if err := json.Unmarshal(out.Stdout, &o); err != nil {
				t.Fatalf("%q: %v", out.Stdout, err)
			}
			if !o.Threads || o.Subprocess != "42" || o.PosixSpawn != 3 || o.Fork != 7 || o.Inet != "inet" || o.Unix != "unix" || !o.UnixNamed || !o.UDP ||
				!slices.Contains(o.Interfaces, "lo") || !slices.Contains(o.GetAddrInfo, "127.0.0.1") || o.Asyncio != "async" ||
				!slices.Equal(o.Multi, []int{1, 2, 3}) || !slices.Equal(o.MultiSpawn, []int{4}) {
				t.Errorf("ordinary Python under the filter: %s", out.Stdout)
			}
			if o.SeccompStatus != "2" {
				t.Errorf("Seccomp: %q in the job's /proc/self/status, want 2 (a filter)", o.SeccompStatus)
			}
		})
	}
}

// What the filter costs a job: the same jobs in two sandboxed zygotes, one
// without the filter and one with it, taken in turns so that both see the
// same machine. print1 pays the filter's installation (one prctl, done by
// the job's process); syscalls makes 100,000 calls the filter lets through
// whatever their arguments (stat: the kernel caches that verdict, Linux
// 5.11 and later) and 100,000 it checks by their arguments (socket), each
// of which runs the program.
//
//	go test -run '^$' -bench BenchmarkSeccompFilter -benchtime 100x ./worker/runner/
func BenchmarkSeccompFilter(b *testing.B) {
	prog, err := seccomp.Program(nil)
	if err != nil {
		b.Skip(err)
	}
	var zs [2]*Zygote // without, with
	var ls [2]*sandboxLayout
	for i := range zs {
		ls[i] = newSandboxLayout(b)
		if i == 1 {
			ls[i].cfg.Seccomp = prog
		}
		zs[i] = startZygote(b, ZygoteConfig{Python: ls[i].python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: ls[i].cfg})
	}
	for _, bb := range []struct{ name, src string }{
		{"print1", "print(1)\n"},
		{"syscalls", "import os, socket\nfor _ in range(100000):\n    os.stat('.')\n" +
			"for _ in range(100000):\n    socket.socket(socket.AF_UNIX).close()\nprint(1)\n"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			specs := [2]Spec{ls[0].spec(b, "a", testUIDA, bb.src), ls[1].spec(b, "a", testUIDA, bb.src)}
			var took [2][]time.Duration
			for b.Loop() {
				for i, z := range zs {
					t0 := time.Now()
					out, err := z.Run(context.Background(), specs[i])
					took[i] = append(took[i], time.Since(t0))
					if err != nil || out.ExitCode != 0 || string(out.Stdout) != "1\n" {
						b.Fatalf("Run: %+v, %v", out, err)
					}
				}
			}
			for i, name := range []string{"p50-ms-without", "p50-ms-with"} {
				slices.Sort(took[i])
				b.ReportMetric(float64(took[i][len(took[i])/2].Microseconds())/1000, name)
			}
		})
	}
}
