"""Hostile bytes on codexec dev's stdio, then a well-formed session: the
server must answer it, and stay within bounded memory."""
import json, os, subprocess, sys, tempfile, threading, time, re
sys.path.insert(0, os.path.dirname(__file__))
from harness import BIN, PATH, Results


def main(R):
    d = tempfile.mkdtemp(prefix="hostile-stdio-")
    p = subprocess.Popen([BIN, "dev", "--data-dir", d], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(f"{d}/log", "w"), env={"PATH": PATH, "HOME": "/root"})
    out = []
    threading.Thread(target=lambda: [out.append(l) for l in p.stdout], daemon=True).start()
    peak = [0]
    def watch():
        while p.poll() is None:
            try:
                peak[0] = max(peak[0], int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{p.pid}/status").read()).group(1)))
            except Exception:
                pass
            time.sleep(0.05)
    threading.Thread(target=watch, daemon=True).start()
    w = p.stdin
    def send(b):
        try:
            w.write(b); w.flush()
        except BrokenPipeError:
            pass
    send(b"{not json\n")
    send(b"\x00\x01\x02\xff\xfe\n")
    send(b"[" * 100000 + b"]" * 100000 + b"\n")
    send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}).encode() + b"\n")
    send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode() + b"\n")
    send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "execute_code", "arguments": {"code": "x='" + "a" * (20 << 20) + "'\nprint(len(x))"}}}).encode() + b"\n")
    big = b'{"jsonrpc":"2.0","id":3,"method":"ping","params":{"x":"' + b"b" * (200 << 20) + b'"}}\n'
    send(big)
    send(json.dumps({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "execute_code", "arguments": {"code": "print('after')"}}}).encode() + b"\n")
    end = time.time() + 120
    while time.time() < end and not any(b'"id":4' in l for l in out):
        time.sleep(0.5)
    alive = p.poll() is None
    ans4 = [l for l in out if b'"id":4' in l]
    R.add("stdio: garbage, 100k-deep nesting, a 20 MiB code and a 200 MiB line, then a call is answered", alive and ans4 and b"after" in ans4[0],
          f"alive={alive} answers={len(out)} peak rss {peak[0] >> 10} MiB; id4: {ans4[0][:120] if ans4 else None}")
    R.add("stdio: peak memory under 2 GiB through it", peak[0] < (2 << 20), f"peak {peak[0] >> 10} MiB")
    p.terminate(); p.wait(20)


if __name__ == "__main__":
    R = Results(); main(R); sys.exit(R.summary())
