# A `codexec dev` server over stdio for the measuring scripts beside this file (cpu_steps.py, setup_steps.py,
# tree_cpu.py, zygote_syscalls.py): started with a data directory of its own, initialized, and called with raw
# JSON-RPC from any number of threads at once.
import json, os, subprocess, threading


class Dev:
    def __init__(self, exe, sandbox, venv, data):
        env = dict(PATH=os.environ['PATH'], HOME=os.environ.get('HOME', '/root'), CODEXEC_DATA_DIR=data,
                   CODEXEC_UID_DIR=data + '/uids', CODEXEC_EXEC_MODE='zygote', CODEXEC_SANDBOX=sandbox,
                   CODEXEC_VENV=venv)
        self.p = subprocess.Popen([exe, 'dev'], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, env=env)
        self.lock, self.waiters, self.nid = threading.Lock(), {}, 0
        threading.Thread(target=self._reader, daemon=True).start()
        self.call('initialize', {'protocolVersion': '2025-03-26', 'capabilities': {},
                                 'clientInfo': {'name': 'devrpc', 'version': '0'}})
        self._send({'jsonrpc': '2.0', 'method': 'notifications/initialized'})

    def _reader(self):
        for line in self.p.stdout:
            m = json.loads(line)
            w = self.waiters.get(m.get('id'))
            if w is not None:
                w[1] = m
                w[0].set()

    def _send(self, msg):
        self.p.stdin.write((json.dumps(msg) + '\n').encode())
        self.p.stdin.flush()

    def call(self, method, params):
        with self.lock:
            self.nid += 1
            i, ev = self.nid, threading.Event()
            self.waiters[i] = [ev, None]
            self._send(dict(jsonrpc='2.0', id=i, method=method, params=params))
        ev.wait(60)
        return self.waiters.pop(i)[1]

    def run(self, code):
        """execute_code's structured result."""
        return self.call('tools/call', dict(name='execute_code', arguments=dict(code=code)))['result']['structuredContent']

    def close(self):
        self.p.stdin.close()
        self.p.wait(30)
