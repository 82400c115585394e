"""The first call of new MCP sessions over HTTP.

Starts `EXE dev --http 127.0.0.1:PORT` on a data directory of its own, opens
one session to warm the default environment, then N new sessions, each
calling execute_code print(1) twice, and prints the client's medians of the
first and second call. With CODEXEC_LOG_LEVEL=debug the server's own times
are its `call timing` debug lines, in the data directory's `log`.

Usage: python first_call_bench.py EXE PORT N (with the official MCP Python
SDK installed, and httpx).
"""
import asyncio, sys, time, statistics, subprocess, os, signal, tempfile
try:
    import httpx2 as httpx
except ImportError:
    import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
async def one(url):
    async with httpx.AsyncClient(timeout=120) as hc:
        async with streamable_http_client(url, http_client=hc) as (r, w, *_):
            async with ClientSession(r, w) as s:
                await s.initialize()
                t = time.perf_counter()
                res = await s.call_tool("execute_code", {"code": "print(1)"})
                first = time.perf_counter() - t
                assert not res.is_error, res
                t = time.perf_counter()
                await s.call_tool("execute_code", {"code": "print(1)"})
                second = time.perf_counter() - t
                return first*1000, second*1000
async def main():
    exe, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    d = tempfile.mkdtemp(prefix="fc-")
    env = dict(os.environ, CODEXEC_DATA_DIR=d)
    p = subprocess.Popen([exe, "dev", "--http", f"127.0.0.1:{port}"], env=env, stderr=open(d+"/log","w"))
    url = f"http://127.0.0.1:{port}/mcp"
    for _ in range(300):
        try:
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1); break
        except Exception: time.sleep(0.2)
    await one(url)  # warm up: the default env, the zygote
    fs, ss = [], []
    for i in range(n):
        f, s = await one(url); fs.append(f); ss.append(s)
    p.send_signal(signal.SIGTERM); p.wait(30)
    print(f"{exe}: first call p50 {statistics.median(fs):.1f} ms, second call p50 {statistics.median(ss):.1f} ms (n={n})")
asyncio.run(main())
