"""A cluster on one host: nats-server, redis-server, one frontend over HTTP,
two workers with data directories of their own."""
import asyncio, contextlib, json, os, signal, subprocess, tempfile, time
from harness import *


class Cluster:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="hostile-cluster-")
        self.procs = []
        self.nats_port, self.redis_port, self.port = free_port(), free_port(), free_port()
        self.service_ports = [self.nats_port, self.redis_port]
        env = {"PATH": PATH, "HOME": "/root", "CODEXEC_CANARY": "CANARY_WORKER_ENV_77"}
        os.makedirs(f"{self.dir}/nats"); os.makedirs(f"{self.dir}/redis")
        self.spawn("nats", [os.path.join(ROOT, "bin", "nats-server"), "-js", "-a", "127.0.0.1", "-p", str(self.nats_port), "-sd", f"{self.dir}/nats"], env)
        self.spawn("redis", ["redis-server", "--bind", "127.0.0.1", "--port", str(self.redis_port), "--save", "", "--dir", f"{self.dir}/redis"], env)
        time.sleep(1)
        common = ["--nats", f"nats://127.0.0.1:{self.nats_port}", "--redis", f"redis://127.0.0.1:{self.redis_port}/0"]
        for w in ("worker1", "worker2"):
            self.spawn(w, [BIN, "worker", "--id", w, "--data-dir", f"{self.dir}/{w}", *common], env)
        self.spawn("frontend", [BIN, "frontend", "--http", f"127.0.0.1:{self.port}", *common], env)
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        wait_http(f"http://127.0.0.1:{self.port}/readyz", self.procs[-1][1], 180)
        self.data_dir = f"{self.dir}/worker1"

    def spawn(self, name, argv, env):
        log = open(f"{self.dir}/{name}.log", "w")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, p, log))

    @property
    def proc(self):
        return self.procs[-1][1]

    def close(self):
        for name, p, log in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL); p.wait()
            log.close()


UIDS = "import os,socket;print('UID', os.getuid(), os.getcwd())"


def worker_pid(c, name):
    return next(p.pid for n, p, _ in c.procs if n == name)


async def faults_section(R, c):
    """A context's call its caller gave up on must not run later: one waiting
    behind a long call, and one sent to a worker stopped (SIGSTOP) past its
    presence record, which the caller is told is lost. Then a create of the
    lost context's name on the resumed worker must make a new context."""
    async with http_session(c.url) as s:
        r = await s.call_tool("create_context", {"name": "slow"})
        cid = (r.structured_content or {}).get("context_id", "slow")
        first = asyncio.create_task(s.call_tool("run_in_context", {"context_id": cid, "code": "import time; time.sleep(45)", "timeout_seconds": 60}))
        await asyncio.sleep(2)
        late = await s.call_tool("run_in_context", {"context_id": cid, "code": "open('late_marker','a').write('ran')", "timeout_seconds": 1})
        await first
        sc = await run(s, "import os; print(os.path.exists('late_marker'))")
        R.add("cluster: a context call its caller gave up on (waiting behind another) does not run later",
              late.is_error and sc.get("stdout") == "False\n", f"late call: {text(late.structured_content or {})[:150]}; marker exists: {sc.get('stdout')!r}")
    async with http_session(c.url) as s:
        r = await s.call_tool("create_context", {"name": "stopped"})
        w = (r.structured_content or {}).get("worker_id", "worker1")
        await s.call_tool("run_in_context", {"context_id": "stopped", "code": "x = 1"})
        pid = worker_pid(c, w)
        os.kill(pid, signal.SIGSTOP)
        try:
            lost = await s.call_tool("run_in_context", {"context_id": "stopped", "code": "open('stop_marker','a').write('ran')", "timeout_seconds": 5})
        finally:
            os.kill(pid, signal.SIGCONT)
        await asyncio.sleep(8)
        sc = await run(s, "import os; print(os.path.exists('stop_marker'))")
        R.add("cluster: a context call told lost (its worker stopped past its presence) does not run once the worker resumes",
              lost.is_error and sc.get("stdout") == "False\n", f"call: {text(lost.structured_content or {})[:150]}; marker exists: {sc.get('stdout')!r}")
        again = await s.call_tool("create_context", {"name": "stopped"})
        sc2 = (await s.call_tool("run_in_context", {"context_id": "stopped", "code": "'x' in dir()"})).structured_content or {}
        R.add("cluster: the lost context's name makes a new context", not again.is_error and sc2.get("stdout") == "False\n",
              f"create: {text(again.structured_content or {})[:150]}; run: {text(sc2)[:100]}")


async def main(R, sections):
    import hostile
    hostile.R = R
    c = Cluster()
    try:
        async with http_session(c.url) as s:  # until both workers announced themselves
            for _ in range(60):
                sc = await run(s, "print(1)")
                if sc.get("stdout") == "1\n":
                    break
                await asyncio.sleep(1)
            await asyncio.sleep(5)
        # Many sessions; each session's uid must be its own on the host, whichever worker runs it.
        seen = {}
        for i in range(12):
            async with http_session(c.url) as s:
                for _ in range(3):
                    sc = await run(s, UIDS)
                    out = sc.get("stdout", "")
                    if "UID" not in out:
                        R.add(f"cluster session {i} runs", False, text(sc)[:200]); continue
                    uid = out.split()[1]
                    seen.setdefault(uid, set()).add((i, sc.get("worker_id")))
        shared = {u: v for u, v in seen.items() if len({i for i, _ in v}) > 1}
        workers = {w for v in seen.values() for _, w in v}
        R.add("cluster: no uid shared by two sessions across two workers of one host", not shared and len(seen) >= 12,
              f"{len(seen)} uids, workers {workers}, shared {shared}")
        async with http_session(c.url) as a, http_session(c.url) as b:
            sc, _ = await hostile.call(b, "workspace_info", {})
            c.bob_handle = sc.get("workspace", "")
            if "sandbox" in sections:
                # bob's secrets may sit on either worker: the walk covers both data dirs' paths.
                await hostile.sandbox_section(a, b, c)
                c.data_dir = f"{c.dir}/worker2"
                walk = hostile.jobs.HOST_WALK.replace("CANARIES", repr(["BOB+SECRET", "CANARY_WORKER+_ENV_77"])).replace("DATA_DIR", repr(c.data_dir))
                for i in range(4):
                    await hostile.probe(a, f"cluster host walk {i} (worker2 data dir)", walk, timeout_seconds=120)
            if "ids" in sections:
                await hostile.ids_section(a, b, c)
            if "exhaust" in sections:
                await hostile.exhaustion_section(a, b)
        if "faults" in sections:
            await faults_section(R, c)
    finally:
        c.close()
        print("cluster logs:", c.dir)
