"""Another principal opens the GET stream of a victim's MCP session id and
reads what the server sends that session (its jobs' streamed output)."""
import json, os, sys, tempfile, threading, time, urllib.request
sys.path.insert(0, os.path.dirname(__file__))
from harness import Dev
from auth import token, rpc


def main(R):
    ta, la = token("tenantA", "alice")
    tb, lb = token("tenantB", "bob")
    d = tempfile.mkdtemp(prefix="hostile-tok-")
    f = os.path.join(d, "tokens"); open(f, "w").write(la + "\n" + lb + "\n")
    srv = Dev("--auth", "tokens", "--auth-tokens", f)
    port = srv.port
    try:
        st, sid_b, _ = rpc(port, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bob", "version": "1"}}, tb)
        rpc(port, "notifications/initialized", {}, tb, sid_b)
        got = []
        def listen():
            req = urllib.request.Request(f"http://127.0.0.1:{port}/mcp", method="GET", headers={
                "Authorization": "Bearer " + ta, "Mcp-Session-Id": sid_b, "Accept": "text/event-stream", "MCP-Protocol-Version": "2025-06-18"})
            try:
                with urllib.request.urlopen(req, timeout=15) as r:
                    got.append(f"status {r.status}")
                    for line in r:
                        got.append(line.decode(errors="replace"))
            except Exception as e:
                got.append("end " + repr(e)[:80])
        t = threading.Thread(target=listen, daemon=True); t.start()
        time.sleep(1)
        code = "import time\nfor i in range(6):\n print('BOBSECRET_stream', i, flush=True); time.sleep(0.5)"
        body = {"name": "execute_code", "arguments": {"code": code}, "_meta": {"progressToken": "p1"}}
        st, _, out = rpc(port, "tools/call", body, tb, sid_b, id=5)
        time.sleep(1)
        stolen = [g for g in got if "BOBSECRET" in g]
        bob_got = out.count("BOBSECRET_stream")
        R.add("another tenant's GET on a victim's session id receives none of its notifications", not stolen,
              f"alice got {len(stolen)} lines {stolen[:2]}; bob's POST answer had {bob_got} mentions; GET: {got[:1]}")
    finally:
        srv.close()


if __name__ == "__main__":
    from harness import Results
    R = Results(); main(R); sys.exit(R.summary())
