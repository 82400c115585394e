"""Harness of the hostile suite: starts codexec (dev over HTTP or stdio, or a
two-worker cluster) and connects official MCP SDK clients to it."""
import asyncio, contextlib, json, os, shutil, signal, socket, subprocess, sys, tempfile, time, urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BIN = os.environ.get("CODEXEC_BIN", os.path.join(ROOT, "bin", "codexec"))
PATH = os.path.join(ROOT, "bin") + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wait_http(url, proc, secs=90):
    end = time.time() + secs
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1); return
        except Exception:
            time.sleep(0.3)
    raise RuntimeError("server not ready: " + url)


class Dev:
    """codexec dev --http on a random loopback port."""
    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="hostile-")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = open(os.path.join(self.dir, "server.log"), "w")
        self.proc = subprocess.Popen([BIN, "dev", "--http", f"127.0.0.1:{self.port}", "--data-dir", self.dir, *extra],
                                     env={"PATH": PATH, "HOME": "/root", "CODEXEC_CANARY": "CANARY_WORKER_ENV_77"},
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_http(f"http://127.0.0.1:{self.port}/readyz", self.proc)

    def close(self):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL); self.proc.wait()
        self.log.close()


@contextlib.asynccontextmanager
async def http_session(url, headers=None):
    import httpx2
    from mcp.shared._httpx_utils import create_mcp_http_client
    client = create_mcp_http_client(headers=headers) if headers else None
    async with streamable_http_client(url, http_client=client) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            yield s


@contextlib.asynccontextmanager
async def stdio_session(data_dir, *extra):
    params = StdioServerParameters(command=BIN, args=["dev", "--data-dir", data_dir, *extra], env={"PATH": PATH, "HOME": "/root"})
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            yield s


async def run(s, code, **kw):
    res = await s.call_tool("execute_code", {"code": code, **kw})
    return res.structured_content or {"error": res.content[0].text if res.content else "", "is_error": res.is_error}


def text(sc):
    return (sc.get("stdout", "") or "") + (sc.get("stderr", "") or "") + (sc.get("error", "") or "") + (sc.get("message", "") or "")


class Results:
    def __init__(self):
        self.rows = []

    def add(self, name, held, detail=""):
        self.rows.append((name, held, detail))
        print(f"{'HELD ' if held else 'BROKEN'} {name}: {detail[:300]}", flush=True)

    def summary(self):
        bad = [r for r in self.rows if not r[1]]
        print(f"\n{len(self.rows) - len(bad)} held, {len(bad)} broken")
        for n, _, d in bad:
            print("  BROKEN", n, "::", d[:500])
        return 1 if bad else 0
