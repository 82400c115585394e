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
    finally:
        c.close()
        print("cluster logs:", c.dir)
