"""One tenant creates contexts until the worker's limit: another tenant's
context must not be the one that makes room."""
import asyncio, json, os, sys, tempfile
sys.path.insert(0, os.path.dirname(__file__))
from harness import *
from auth import token


async def main(R):
    from hostile import call
    ta, la = token("tenantA", "alice")
    tb, lb = token("tenantB", "bob")
    d = tempfile.mkdtemp(prefix="hostile-tok-")
    f = os.path.join(d, "tokens"); open(f, "w").write(la + "\n" + lb + "\n")
    srv = Dev("--auth", "tokens", "--auth-tokens", f, "--max-contexts", "4")
    try:
        async with http_session(srv.url, {"Authorization": "Bearer " + tb}) as b, http_session(srv.url, {"Authorization": "Bearer " + ta}) as a:
            sc, _ = await call(b, "create_context", {})
            ctx = sc.get("context_id", "")
            await call(b, "run_in_context", {"context_id": ctx, "code": "x = 'bob state'"})
            made = []
            for i in range(4):
                sc, err = await call(a, "create_context", {})
                made.append(sc.get("status") or sc.get("context_id") or str(sc)[:80])
            sc, _ = await call(b, "run_in_context", {"context_id": ctx, "code": "print(x)"})
            R.add("another tenant's contexts do not evict bob's (--max-contexts 4, alice makes 4)", "bob state" in json.dumps(sc),
                  f"alice: {made}; bob: {json.dumps(sc)[:200]}")
    finally:
        srv.close()


if __name__ == "__main__":
    R = Results(); asyncio.run(main(R)); sys.exit(R.summary())
