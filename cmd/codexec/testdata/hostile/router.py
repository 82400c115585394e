"""What the frontend reads of a message before mcp-go does, attacked with the
spellings mcp-go's decoder accepts; initializes that carry a session id; and
what one tenant's token reads of the others: codexec dev --http --auth
tokens, tenants A (alice) and B (bob)."""
import asyncio, http.client, json, os, re, sys, threading, time, urllib.request
from harness import *
from auth import token, rpc, tool

ULID = re.compile(r'^[0-9A-HJKMNP-TV-Z]{26}$')


def body_of(out):
    try:
        return json.loads(out.split("data: ")[-1] if "data: " in out else out)
    except Exception:
        return {}


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1])
    return 0


def post_raw(port, tok, sid, raw):
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "MCP-Protocol-Version": "2025-11-25", "Authorization": "Bearer " + tok, "Mcp-Session-Id": sid}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=raw.encode(), headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return body_of(r.read().decode(errors="replace"))
    except urllib.error.HTTPError as e:
        return body_of(e.read().decode(errors="replace"))


async def main(R):
    ta, la = token("tenantA", "alice")
    tb, lb = token("tenantB", "bob")
    d = tempfile.mkdtemp(prefix="hostile-router-")
    f = os.path.join(d, "tokens"); open(f, "w").write("\n".join([la, lb]) + "\n")
    srv = Dev("--auth", "tokens", "--auth-tokens", f)
    port = srv.port
    try:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}
        _, sa, _ = rpc(port, "initialize", init, ta)
        rpc(port, "notifications/initialized", {}, ta, sa)
        # A task call spelled otherwise than "task" must be the router's task
        # (a ULID), never one of mcp-go's own (a UUID, kept in memory for good).
        code = json.dumps("print(1)")
        for key in ['"Task"', '"TASK"', '"t\\u0061sk"', '"taſk"', '"tas\\u212a"']:
            out = post_raw(port, ta, sa, '{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":%s},%s:{}}}' % (code, key))
            tid = ((out.get("result") or {}).get("task") or {}).get("taskId", "")
            R.add(f"task call with the key {key} is codexec's task", bool(ULID.match(tid)), json.dumps(out)[:200])
        out = post_raw(port, ta, sa, '{"jsonrpc":"2.0","id":6,"method":"tasks\\/list","params":{}}')
        ids = [t.get("taskId", "") for t in (out.get("result") or {}).get("tasks", [])]
        R.add("tasks\\/list (escaped) is answered by codexec", ids and all(ULID.match(i) for i in ids), json.dumps(out)[:200])
        # A flood of such calls grows the frontend by little.
        before = rss_kib(srv.proc.pid)
        raw = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":" "},"Task":{}}}'
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25",
             "Authorization": "Bearer " + ta, "Mcp-Session-Id": sa}
        def flood():
            c = http.client.HTTPConnection("127.0.0.1", port)
            for _ in range(2500):
                c.request("POST", "/mcp", raw, h); c.getresponse().read()
        ths = [threading.Thread(target=flood) for _ in range(8)]
        [t.start() for t in ths]; [t.join() for t in ths]
        time.sleep(2)
        grown = rss_kib(srv.proc.pid) - before
        R.add("20,000 task calls spelled \"Task\" hold no memory", grown < 100 * 1024, f"frontend RSS grew {grown} KiB")
        # initialize with a session id header: its new session must not stay.
        before = rss_kib(srv.proc.pid)
        ih = dict(h); ih["Mcp-Session-Id"] = sa
        iraw = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        def inits():
            c = http.client.HTTPConnection("127.0.0.1", port)
            for _ in range(2000):
                c.request("POST", "/mcp", iraw, ih); c.getresponse().read()
        ths = [threading.Thread(target=inits) for _ in range(8)]
        [t.start() for t in ths]; [t.join() for t in ths]
        time.sleep(2)
        grown = rss_kib(srv.proc.pid) - before
        R.add("16,000 initializes carrying a session id hold no sessions", grown < 50 * 1024, f"frontend RSS grew {grown} KiB")
        # bob's token reads none of the series that count alice's work.
        _, sb, _ = rpc(port, "initialize", init, tb)
        rpc(port, "notifications/initialized", {}, tb, sb)
        tool(port, ta, sa, "execute_code", {"code": "print('alice works')"})
        req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": "Bearer " + tb})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        foreign = [l for l in text.splitlines() if l and not l.startswith("#") and 'tenant="tenantB"' not in l
                   and not l.startswith("codexec_check_up{") and not l.startswith("codexec_ready ")]
        R.add("bob's /metrics shows no pool-wide series", not foreign, "; ".join(foreign[:5]))
    finally:
        srv.close()


if __name__ == "__main__":
    R = Results()
    asyncio.run(main(R))
    sys.exit(R.summary())
