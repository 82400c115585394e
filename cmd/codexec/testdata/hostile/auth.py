"""Cross-tenant attacks against codexec dev --http --auth tokens."""
import asyncio, json, os, subprocess
from harness import *


def token(tenant, principal):
    out = subprocess.run([BIN, "token", "--tenant", tenant, "--principal", principal], capture_output=True, text=True, check=True).stdout
    tok = out.split("token:")[1].split()[0]
    line = out.split("line:")[1].strip()
    return tok, line


def rpc(port, method, params, tok=None, sid=None, id=1, extra=None):
    import urllib.request
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    if tok: h["Authorization"] = "Bearer " + tok
    if sid: h["Mcp-Session-Id"] = sid
    h.update(extra or {})
    body = json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            txt = r.read().decode(errors="replace")
            return r.status, r.headers.get("Mcp-Session-Id"), txt
    except urllib.error.HTTPError as e:
        return e.code, None, e.read().decode(errors="replace")


def tool(port, tok, sid, name, args, id=2):
    return rpc(port, "tools/call", {"name": name, "arguments": args}, tok, sid, id)


async def main(R):
    from hostile import call, run
    ta, la = token("tenantA", "alice")
    tb, lb = token("tenantB", "bob")
    tc, lc = token("tenantA", "carol")
    d = tempfile.mkdtemp(prefix="hostile-tok-")
    f = os.path.join(d, "tokens"); open(f, "w").write("\n".join([la, lb, lc]) + "\n")
    srv = Dev("--auth", "tokens", "--auth-tokens", f)
    port = srv.port
    try:
        st, sid_none, body = rpc(port, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}})
        R.add("no token: 401 with WWW-Authenticate", st == 401, f"{st} {body[:100]}")
        st, _, body = rpc(port, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}, tok="cx_" + "A" * 43)
        R.add("forged token refused", st == 401, f"{st}")
        # bob's state
        st, sid_b, _ = rpc(port, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bob", "version": "1"}}, tb)
        rpc(port, "notifications/initialized", {}, tb, sid_b)
        _, _, out = tool(port, tb, sid_b, "execute_code", {"code": "open('BOBSECRET_cwd','w').write('BOBSECRET_content');print('BOBSECRET_run')"})
        bob_job = json.loads(out.split("data: ")[-1] if "data: " in out else out)["result"]["structuredContent"]["job_id"]
        tool(port, tb, sid_b, "initialize_code_file", {"filename": "bobfile", "content": "print('BOBSECRET_file')"})
        _, _, out = tool(port, tb, sid_b, "workspace_info", {})
        handle = json.loads(out.split("data: ")[-1] if "data: " in out else out)["result"]["structuredContent"]["workspace"]
        _, _, out = tool(port, tb, sid_b, "create_context", {})
        ctx = json.loads(out.split("data: ")[-1] if "data: " in out else out)["result"]["structuredContent"].get("context_id", "")
        # alice presents bob's session id with her own token
        for name, args in [("execute_code", {"code": "import os;print(os.listdir('.'))"}), ("list_code_files", {}),
                           ("get_job_result", {"job_id": bob_job}), ("read_code_file", {"file_path": "bobfile.py"}),
                           ("read_code_file", {"job_id": bob_job})]:
            st, _, out = tool(port, ta, sid_b, name, args)
            R.add(f"alice with bob's session id: {name}", "BOBSECRET" not in out, f"{st} {out[:160]}")
        st, _, out = rpc(port, "resources/read", {"uri": "codexec://workspace/BOBSECRET_cwd"}, ta, sid_b)
        R.add("alice with bob's session id: resources/read", "BOBSECRET_content" not in out, f"{st} {out[:160]}")
        # alice (same tenant as carol, other tenant than bob) with bob's handle, job id, context
        for who, tok in [("alice(tenantA)", ta), ("carol(tenantA)", tc)]:
            async with http_session(srv.url, {"Authorization": "Bearer " + tok}) as a:
                for t, args in [("workspace_info", {"workspace": handle}), ("list_code_files", {"workspace": handle}),
                                ("read_code_file", {"file_path": "bobfile.py", "workspace": handle}),
                                ("execute_code_file", {"file_path": "bobfile.py", "workspace": handle}),
                                ("execute_code", {"code": "import os;print(os.listdir('.'))", "workspace": handle}),
                                ("get_job_result", {"job_id": bob_job}), ("get_job_result", {"job_id": bob_job, "workspace": handle}),
                                ("read_code_file", {"job_id": bob_job, "workspace": handle}),
                                ("run_in_context", {"context_id": ctx, "code": "print('LEAK')", "workspace": handle}),
                                ("get_job_results", {"batch_id": "y" * 20, "job_ids": [bob_job], "workspace": handle}),
                                ("upload_file", {"path": "BOBSECRET_cwd", "content": "overwritten", "workspace": handle})]:
                    sc, err = await call(a, t, args)
                    s = json.dumps(sc)
                    R.add(f"{who} with bob's handle: {t} {list(args)}", "BOBSECRET" not in s and "LEAK" not in s and "overwritten" not in s, s[:160])
                try:
                    r = await a.read_resource(f"codexec://workspace/BOBSECRET_cwd?workspace={handle}")
                    body = str(r.contents)
                except Exception as e:
                    body = str(e)
                R.add(f"{who} resources/read bob's file by handle", "BOBSECRET_content" not in body, body[:160])
        _, _, out = tool(port, tb, sid_b, "execute_code", {"code": "print(open('BOBSECRET_cwd').read())"})
        R.add("bob's file unchanged", "BOBSECRET_content" in out, out[-200:])
        # DELETE bob's session with alice's token
        import urllib.request
        req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", method="DELETE", headers={"Authorization": "Bearer " + ta, "Mcp-Session-Id": sid_b})
        try:
            st = urllib.request.urlopen(req, timeout=10).status
        except urllib.error.HTTPError as e:
            st = e.code
        _, _, out = tool(port, tb, sid_b, "execute_code", {"code": "print('bob alive')"})
        R.add("alice cannot DELETE bob's MCP session", "bob alive" in out, f"DELETE {st}; bob: {out[-160:]}")
        # alice's GET stream on bob's session id: getsteal.py
        # Sessionless (2026-07-28) requests: alice's notifications/cancelled of bob's request id.
        import threading, time
        meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "x", "version": "1"}}
        modern = {"MCP-Protocol-Version": "2026-07-28"}
        got = {}
        def bob_call():
            got["out"] = rpc(port, "tools/call", {"name": "execute_code", "arguments": {"code": "import time\ntime.sleep(6)\nprint('bob finished')"}, "_meta": meta},
                             tb, id=7, extra={**modern, "Mcp-Method": "tools/call", "Mcp-Name": "execute_code"})[2]
        t = threading.Thread(target=bob_call); t.start(); time.sleep(2)
        for rid in range(0, 16):
            body = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": rid, "_meta": meta}}).encode()
            h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", "Authorization": "Bearer " + ta,
                 **modern, "Mcp-Method": "notifications/cancelled"}
            try:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/mcp", data=body, headers=h, method="POST"), timeout=10).read()
            except Exception:
                pass
        t.join()
        R.add("alice's sessionless notifications/cancelled leaves bob's sessionless call alone", "bob finished" in got.get("out", ""), got.get("out", "")[-160:])
    finally:
        srv.close()
