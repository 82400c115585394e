#!/bin/sh
# Runs every part of the hostile suite against bin/codexec (make build first).
# Needs root, bubblewrap, redis-server, bin/nats-server and a Python with the
# official MCP SDK (mcp): PY=/path/to/venv/bin/python.
set -u
PY=${PY:-python3}
cd "$(dirname "$0")"
rc=0
"$PY" hostile.py dev || rc=1
"$PY" hostile.py auth || rc=1
"$PY" router.py || rc=1
"$PY" getsteal.py || rc=1
"$PY" contexts_evict.py || rc=1
"$PY" stdio_raw.py || rc=1
"$PY" hostile.py cluster || rc=1
exit $rc
