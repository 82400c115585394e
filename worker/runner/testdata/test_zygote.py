"""Tests of zygote.py on its own, without the Go side.

Each test starts zygote.py the way worker/runner starts it (the bootstrap of
zygote_protocol.json with fd 3 a SOCK_SEQPACKET socket, the code as the
first datagram), unsandboxed, and talks the protocol of
zygote_protocol.json to it: every message the zygote sends is checked
against that description, field by field. Static tests check that
zygote.py sends and reads exactly the fields described there, including
the sandbox's, which only a root worker can exercise.

Run: python3 worker/runner/testdata/test_zygote.py -v
(go test ./worker/runner runs it too: TestZygoteProtocolPython.)
No root, no bubblewrap, nothing but the standard library.
"""

import ast
import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.dirname(HERE)
ZYGOTE_PY = os.path.join(RUNNER, 'zygote.py')
SPEC_JSON = os.path.join(RUNNER, 'zygote_protocol.json')

with open(SPEC_JSON) as f:
    SPEC = json.load(f)
with open(ZYGOTE_PY, 'rb') as f:
    SOURCE = f.read()

# A bound on every wait, so that a broken zygote fails a test instead of
# hanging it. Never reached by a passing run.
TIMEOUT = 60


# ---------------------------------------------------------------------------
# The description's types.


def parse_type(text):
    """Parse a type of the description (int, list<T>, tuple<T,...>, ...)
    into (name, [args] or None)."""
    t = text.replace(' ', '')

    def parse(i):
        j = i
        while j < len(t) and (t[j].isalnum() or t[j] == '_'):
            j += 1
        if j == i:
            raise ValueError('bad type %r at %d' % (text, i))
        name = t[i:j]
        if j < len(t) and t[j] == '<':
            args = []
            j += 1
            while True:
                arg, j = parse(j)
                args.append(arg)
                if j < len(t) and t[j] == ',':
                    j += 1
                elif j < len(t) and t[j] == '>':
                    return (name, args), j + 1
                else:
                    raise ValueError('bad type %r at %d' % (text, j))
        return (name, None), j

    ty, end = parse(0)
    if end != len(t):
        raise ValueError('bad type %r' % text)
    return ty


PRIMITIVES = {'int', 'float', 'string', 'bool'}
GENERICS = {'list': 1, 'map': 1, 'tuple': None}


def check_type_known(ty, where):
    name, args = ty
    if name in PRIMITIVES or name in SPEC['objects']:
        if args is not None:
            raise AssertionError('%s: %s takes no arguments' % (where, name))
        return
    if name not in GENERICS:
        raise AssertionError('%s: unknown type %s' % (where, name))
    if not args or (GENERICS[name] is not None and len(args) != GENERICS[name]):
        raise AssertionError('%s: %s with %r' % (where, name, args))
    for a in args:
        check_type_known(a, where)


def type_errors(value, ty, where):
    """What is wrong with value as a ty; [] when nothing."""
    name, args = ty
    if name == 'int':
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif name == 'float':
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif name == 'string':
        ok = isinstance(value, str)
    elif name == 'bool':
        ok = isinstance(value, bool)
    elif name == 'list':
        if not isinstance(value, list):
            return ['%s: %r is not a list' % (where, value)]
        return [e for i, v in enumerate(value) for e in type_errors(v, args[0], '%s[%d]' % (where, i))]
    elif name == 'map':
        if not isinstance(value, dict):
            return ['%s: %r is not an object' % (where, value)]
        return [e for k, v in value.items() for e in type_errors(v, args[0], '%s[%r]' % (where, k))]
    elif name == 'tuple':
        if not isinstance(value, list) or len(value) != len(args):
            return ['%s: %r is not a %d-tuple' % (where, value, len(args))]
        return [e for i, (v, a) in enumerate(zip(value, args)) for e in type_errors(v, a, '%s[%d]' % (where, i))]
    else:
        return object_errors(value, SPEC['objects'][name]['fields'], where)
    return [] if ok else ['%s: %r is not a %s' % (where, value, name)]


def object_errors(value, fields, where):
    if not isinstance(value, dict):
        return ['%s: %r is not an object' % (where, value)]
    errs = ['%s: unknown field %r' % (where, k) for k in value if k not in fields]
    for k, f in fields.items():
        if k not in value:
            if f['required']:
                errs.append('%s: no %r' % (where, k))
            continue
        if value[k] is None and f.get('nullable'):
            continue
        errs.extend(type_errors(value[k], parse_type(f['type']), '%s.%s' % (where, k)))
    return errs


def message_errors(msg, sender):
    """What is wrong with msg as a message from sender; [] when nothing."""
    if not isinstance(msg, dict):
        return ['%r is not an object' % (msg,)]
    m = SPEC['messages'].get(msg.get('op'))
    if m is None:
        return ['unknown op in %r' % (msg,)]
    if m['from'] != sender:
        return ['%s sent %r, a message of the %s' % (sender, msg['op'], m['from'])]
    return object_errors(msg, m['fields'], msg['op'])


def run_errors(hdr, job):
    """What is wrong with a run request of header hdr and body job; []
    when nothing."""
    body = SPEC['messages']['run']['body']
    return message_errors(hdr, 'worker') + object_errors(job, SPEC['objects'][body]['fields'], body)


def encode_run(hdr, job):
    """A run request's datagram: the header, a newline, the job."""
    return json.dumps(hdr).encode() + b'\n' + json.dumps(job).encode()


def ops_from(sender):
    return {op for op, m in SPEC['messages'].items() if m['from'] == sender}


# ---------------------------------------------------------------------------
# The description itself, and zygote.py read as code.


class DescriptionTest(unittest.TestCase):
    def test_types_resolve(self):
        for oname, obj in SPEC['objects'].items():
            for fname, f in obj['fields'].items():
                check_type_known(parse_type(f['type']), '%s.%s' % (oname, fname))
                self.assertIsInstance(f['required'], bool, fname)
        for op, m in SPEC['messages'].items():
            self.assertIn(m['from'], ('worker', 'zygote'), op)
            self.assertIsInstance(m['fds'], list, op)
            self.assertEqual(m['fields']['op'], {'type': 'string', 'required': True}, op)
            if 'body' in m:
                self.assertIn(m['body'], SPEC['objects'], op)
            for fname, f in m['fields'].items():
                check_type_known(parse_type(f['type']), '%s.%s' % (op, fname))
                self.assertIsInstance(f['required'], bool, fname)
        self.assertEqual(SPEC['bootstrap']['config'], 'config')
        self.assertIn('config', SPEC['objects'])

    def test_checker_rejects(self):
        # The checker that every test relies on must be able to fail.
        good = {'op': 'exited', 'id': 1, 'status': 0}
        self.assertEqual(message_errors(good, 'zygote'), [])
        for bad in (
            {'op': 'exited', 'id': 1},
            {'op': 'exited', 'id': 1, 'status': 0, 'extra': 1},
            {'op': 'exited', 'id': '1', 'status': 0},
            {'op': 'exited', 'id': True, 'status': 0},
            {'op': 'exited', 'id': None, 'status': 0},
            {'op': 'run', 'id': 1, 'script': '/s', 'dir': '/', 'env': []},
            {'op': 'nope'},
        ):
            self.assertNotEqual(message_errors(bad, 'zygote'), [], bad)
        self.assertEqual(message_errors({'op': 'failed', 'id': None, 'error': 'x'}, 'zygote'), [])
        hdr = {'op': 'run', 'id': 1, 'net': 'k', 'unmount': ['/u']}
        job = {'script': '/s', 'dir': '/', 'env': ['A=1'], 'rlimits': [[4, 0, -1]],
               'confine': {'uid': 1000, 'gid': 1000, 'binds': [['/x', True]]}}
        self.assertEqual(run_errors(hdr, job), [])
        job['confine']['binds'] = [['/x']]
        self.assertNotEqual(run_errors(hdr, job), [])
        job['confine']['binds'] = [['/x', True]]
        self.assertNotEqual(run_errors(dict(hdr, script='/s'), job), [])  # a job's field in the header
        self.assertNotEqual(run_errors(hdr, dict(job, id=1)), [])  # a header's field in the job


def _const_str(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


class SourceTest(unittest.TestCase):
    """zygote.py read as code: what it sends and the fields it reads."""

    # The names zygote.py gives the protocol's objects, and which object
    # each one holds. A string key read on any other name must be one of
    # NOT_PROTOCOL: a new reader of a message fails the test until it is
    # classified here.
    RECEIVERS = {
        'hdr': ('run', 'kill'),
        'req': ('job',),
        'cfg': ('config',),
        'sandbox': ('sandbox',),
        'c': ('confine',),
    }
    NOT_PROTOCOL = {('env', 'TZ')}

    @classmethod
    def setUpClass(cls):
        cls.tree = ast.parse(SOURCE, ZYGOTE_PY)

    def fields_of(self, names):
        out = set()
        for n in names:
            spec = SPEC['messages'].get(n) or SPEC['objects'][n]
            out |= set(spec['fields'])
        return out

    def test_sends_exactly_the_described_fields(self):
        sent = {}
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == '_send'):
                continue
            self.assertEqual(len(node.args), 2, ast.dump(node))
            msg = node.args[1]
            self.assertIsInstance(msg, ast.Dict, 'line %d: _send of something other than a dict literal' % node.lineno)
            keys = [_const_str(k) for k in msg.keys]
            self.assertNotIn(None, keys, 'line %d' % node.lineno)
            op = _const_str(msg.values[keys.index('op')])
            self.assertIsNotNone(op, 'line %d: op is not a constant' % node.lineno)
            self.assertIn(op, ops_from('zygote'), 'line %d' % node.lineno)
            self.assertEqual(set(keys), set(SPEC['messages'][op]['fields']), 'line %d: %s' % (node.lineno, op))
            sent.setdefault(op, []).append(node.lineno)
        # The messages of every job, formatted without the json module.
        funcs = zygote_functions()
        for name, op, args in (('_started', 'started', (7, 1234)), ('_exited', 'exited', (7, 0x0100))):
            used = [n.lineno for n in ast.walk(self.tree)
                    if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name]
            self.assertTrue(used, '%s is never called' % name)
            msg = json.loads(funcs[name](*args))
            self.assertEqual(msg['op'], op)
            self.assertEqual(set(msg), set(SPEC['messages'][op]['fields']), name)
            self.assertEqual([msg[k] for k in msg if k != 'op'], list(args), name)
            sent.setdefault(op, []).extend(used)
        self.assertEqual(set(sent), ops_from('zygote'))

    def test_reads_exactly_the_described_fields(self):
        read = {name: set() for name in self.RECEIVERS}
        for node in ast.walk(self.tree):
            recv = key = None
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.ctx, ast.Load):
                recv, key = node.value.id, _const_str(node.slice)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == 'get'
                  and isinstance(node.func.value, ast.Name) and node.args):
                recv, key = node.func.value.id, _const_str(node.args[0])
            if key is None:
                continue
            if recv in read:
                read[recv].add(key)
            else:
                self.assertIn((recv, key), self.NOT_PROTOCOL,
                              'line %d: %s[%r] is read: a field of which message?' % (node.lineno, recv, key))
        for name, objs in self.RECEIVERS.items():
            self.assertEqual(read[name], self.fields_of(objs), '%s (%s)' % (name, ', '.join(objs)))

    def test_bootstrap_names_the_code(self):
        # Tracebacks are stripped of the zygote's frames by this name.
        code = SPEC['bootstrap']['code']
        names = [n for n in ast.walk(self.tree) if isinstance(n, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == '_ZYGOTE_FILE' for t in n.targets)]
        self.assertEqual(len(names), 1)
        self.assertIn(repr(names[0].value.value), code)
        self.assertIn('fileno=3', code)
        self.assertIn('_ctl', code)  # zygote.py's _main reads its socket from it
        self.assertIn('_ctl', SOURCE.decode())
        self.assertEqual(SPEC['transport']['max_datagram_bytes'], (1 << 20) - 1)
        self.assertIn('recv(1<<20)', code)


# ---------------------------------------------------------------------------
# zygote.py running, driven over its socket.


def read_all(fd):
    """Read fd to end of file (bounded by TIMEOUT) and close it."""
    out = b''
    deadline = time.monotonic() + TIMEOUT
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError('no end of file on fd %d; read %r' % (fd, out))
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return out
            out += chunk
    finally:
        os.close(fd)


def read_line(fd):
    """Read up to a newline (bounded by TIMEOUT), leaving fd open."""
    out = b''
    deadline = time.monotonic() + TIMEOUT
    while not out.endswith(b'\n'):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError('no line on fd %d; read %r' % (fd, out))
        r, _, _ = select.select([fd], [], [], left)
        if r:
            chunk = os.read(fd, 1)
            if not chunk:
                raise AssertionError('end of file on fd %d; read %r' % (fd, out))
            out += chunk
    return out


def proc_stat(pid):
    """(state, ppid) of pid from /proc, or None once it is gone."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rindex(')') + 2:].split()
    return rest[0], int(rest[1])


def wait_until(cond, what):
    deadline = time.monotonic() + TIMEOUT
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError('gave up waiting for ' + what)
        time.sleep(0.01)


class Job:
    """A run request's other ends: stdin's write end, stdout's and stderr's
    read ends."""

    def __init__(self, jid, stdin, stdout, stderr):
        self.id, self.stdin, self.stdout, self.stderr = jid, stdin, stdout, stderr

    def output(self):
        if self.stdin is not None:
            os.close(self.stdin)
            self.stdin = None
        return read_all(self.stdout), read_all(self.stderr)


class Zygote:
    """zygote.py started as zygote_linux.go starts it, unsandboxed."""

    def __init__(self, test, preload=('json',), env=None):
        self.test = test
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # Out of the way of fd 3 here, so that the child's dup2 onto 3
        # always makes a new, inheritable descriptor.
        high = fcntl.fcntl(theirs.fileno(), fcntl.F_DUPFD_CLOEXEC, 10)
        theirs.close()
        self.log = tempfile.TemporaryFile()
        argv = [sys.executable, '-S', '-c', SPEC['bootstrap']['code'], json.dumps({'preload': list(preload)})]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            env=env if env is not None else {}, cwd='/', close_fds=False,
            preexec_fn=lambda: os.dup2(high, 3))
        os.close(high)
        self.ctl = ours
        self.ctl.settimeout(TIMEOUT)
        self.ctl.send(SOURCE)
        self.next_id = 0
        test.addCleanup(self.close)

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors='replace')

    def recv(self):
        """The zygote's next message, checked against the description."""
        try:
            data = self.ctl.recv(1 << 20)
        except socket.timeout:
            raise AssertionError('no message from the zygote; its output:\n' + self.output())
        if not data:
            raise AssertionError('the zygote closed its socket; its output:\n' + self.output())
        msg = json.loads(data)
        errs = message_errors(msg, 'zygote')
        self.test.assertEqual(errs, [], 'message %r' % (msg,))
        return msg

    def send(self, msg, fds=()):
        data = msg if isinstance(msg, bytes) else json.dumps(msg).encode()
        anc = []
        if fds:
            anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack('%di' % len(fds), *fds))]
        self.ctl.sendmsg([data], anc)

    def ready(self):
        msg = self.recv()
        self.test.assertEqual(msg['op'], 'ready')
        return msg

    def run(self, script, dir=None, env=(), rlimits=None, stdin=b'', jid=None, request=None):
        """Send a run request for script (its source, written to a file)
        with fresh pipes; returns the Job."""
        if jid is None:
            self.next_id += 1
            jid = self.next_id
        d = dir or tempfile.mkdtemp(prefix='zygote-test-')
        self.test.addCleanup(_rmtree, d)
        path = os.path.join(d, 'job.py')
        with open(path, 'w') as f:
            f.write(script)
        hdr = {'op': 'run', 'id': jid}
        job = {'script': path, 'dir': d, 'env': list(env)}
        if rlimits is not None:
            job['rlimits'] = rlimits
        if request is not None:
            job.update(request)
        self.test.assertEqual(run_errors(hdr, job), [])
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        os.write(in_w, stdin)  # small: it fits the pipe
        try:
            self.send(encode_run(hdr, job), [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        return Job(jid, in_w, out_r, err_r)

    def finish(self, job):
        """Expect started then exited for job; returns (pid, status,
        stdout, stderr)."""
        m = self.recv()
        self.test.assertEqual((m['op'], m['id']), ('started', job.id), m)
        pid = m['pid']
        out, err = job.output()
        m = self.recv()
        self.test.assertEqual((m['op'], m['id']), ('exited', job.id), (m, out, err))
        return pid, m['status'], out, err

    def close(self):
        if self.ctl.fileno() >= 0:
            self.ctl.close()
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError('the zygote did not exit at end of file')
        finally:
            self.log.close()


def _rmtree(d):
    import shutil

    shutil.rmtree(d, ignore_errors=True)


HELLO = 'import sys\nsys.stdout.write("out:" + sys.stdin.read())\nsys.stderr.write("err")\n'


class ZygoteTest(unittest.TestCase):
    def test_ready(self):
        z = Zygote(self, preload=['json', 'codexec_no_such_module'])
        m = z.ready()
        self.assertEqual(m['pid'], z.proc.pid)
        self.assertEqual(m['python'], '%d.%d.%d' % sys.version_info[:3])
        self.assertEqual(m['preloaded'], ['json'])
        self.assertEqual(list(m['failed']), ['codexec_no_such_module'])
        self.assertTrue(m['failed']['codexec_no_such_module'].startswith('ModuleNotFoundError: '), m['failed'])
        self.assertEqual(m['threads'], [])
        self.assertGreaterEqual(m['import_ms'], 0)

    def test_unsafe_zygote_says_so_and_exits(self):
        d = tempfile.mkdtemp(prefix='zygote-test-')
        self.addCleanup(_rmtree, d)
        with open(os.path.join(d, 'codexec_starts_thread.py'), 'w') as f:
            f.write('import threading, time\n'
                    'threading.Thread(target=time.sleep, args=(600,), name="sleeper", daemon=True).start()\n')
        z = Zygote(self, preload=['codexec_starts_thread'], env={'PYTHONPATH': d})
        m = z.ready()
        self.assertEqual(m['threads'], ['sleeper'])
        self.assertEqual(z.proc.wait(TIMEOUT), 3)
        self.assertEqual(z.ctl.recv(1 << 20), b'')  # nothing after ready

    def test_run(self):
        z = Zygote(self)
        z.ready()
        env = ['A=1', 'B=x=y', 'C=']
        job = z.run('import json, os, sys\n'
                    'print(json.dumps([os.getpid(), os.getcwd(), dict(os.environ), sys.argv, sys.stdin.read()]))\n'
                    'sys.stderr.write("err")\n', env=env, stdin=b'in')
        pid, status, out, err = z.finish(job)
        got_pid, cwd, got_env, argv, stdin = json.loads(out)
        self.assertEqual(got_pid, pid)  # started names the job's process
        self.assertEqual(os.path.realpath(cwd), os.path.realpath(os.path.dirname(argv[0])))
        self.assertEqual(got_env, {'A': '1', 'B': 'x=y', 'C': ''})
        self.assertEqual(stdin, 'in')
        self.assertEqual(err, b'err')
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)

    def test_exit_status_is_a_wait_status(self):
        z = Zygote(self)
        z.ready()
        _, status, _, _ = z.finish(z.run('import sys\nsys.exit(7)\n'))
        self.assertEqual(status, 7 << 8)
        _, status, _, _ = z.finish(z.run('import os\nos._exit(9)\n'))  # no report: from waitpid
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 9, status)
        _, status, _, _ = z.finish(z.run('import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n'))
        self.assertTrue(os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status)

    def test_a_job_holds_only_stdio_and_cannot_forge_its_status(self):
        # Whatever a job writes on whatever it holds, its status is its
        # process's: it holds no descriptor but 0, 1 and 2, and none to the
        # zygote that a report of its own could go on.
        z = Zygote(self)
        z.ready()
        _, status, out, _ = z.finish(z.run(
            'import json, os, sys\n'
            'fds = sorted(int(n) for n in os.listdir("/proc/self/fd"))\n'
            'print(json.dumps(fds), flush=True)\n'
            'for fd in set(range(3, 1100)) | set(fds):\n'
            '    for msg in (b"0", b\'{"op":"exited","id":1,"status":0}\'):\n'
            '        try:\n'
            '            os.write(fd, msg)\n'
            '        except OSError:\n'
            '            break\n'
            'sys.exit(1)\n'))
        self.assertEqual(status, 1 << 8)
        fds = json.loads(out.splitlines()[0])
        self.assertEqual([fd for fd in fds if fd > 2][:-1], [])  # the listing's own, last

    def test_rlimits(self):
        z = Zygote(self)
        z.ready()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        lim = min(64, hard)
        job = z.run('import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE), '
                    'resource.getrlimit(resource.RLIMIT_CORE))\n',
                    rlimits=[[resource.RLIMIT_NOFILE, lim, lim], [resource.RLIMIT_CORE, 0, -1]])
        _, status, out, err = z.finish(job)
        self.assertEqual(status, 0, err)
        core_hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
        self.assertEqual(out.decode().strip(), '%r %r' % ((lim, lim), (0, core_hard)))

    def test_kill(self):
        z = Zygote(self)
        z.ready()
        job = z.run('import sys, time\nprint("up", flush=True)\ntime.sleep(600)\n')
        m = z.recv()
        self.assertEqual((m['op'], m['id']), ('started', job.id))
        self.assertEqual(read_line(job.stdout), b'up\n')
        z.send({'op': 'kill', 'id': job.id})
        m = z.recv()
        self.assertEqual((m['op'], m['id']), ('exited', job.id), m)
        self.assertTrue(os.WIFSIGNALED(m['status']) and os.WTERMSIG(m['status']) == signal.SIGKILL, m)
        job.output()  # end of file: nothing of the job holds its pipes
        # A kill for a finished or an unknown job is ignored.
        z.send({'op': 'kill', 'id': job.id})
        z.send({'op': 'kill', 'id': 12345})
        self.assertEqual(z.finish(z.run(HELLO))[1:], (0, b'out:', b'err'))

    def test_jobs_interleave(self):
        z = Zygote(self)
        z.ready()
        # a waits on its stdin, which stays open until b has finished.
        a = z.run('import sys\nsys.stdout.write(sys.stdin.read())\n', stdin=b'a')
        m = z.recv()
        self.assertEqual((m['op'], m['id']), ('started', a.id))
        b = z.run(HELLO, stdin=b'b')
        self.assertEqual(z.finish(b)[1:], (0, b'out:b', b'err'))
        self.assertEqual(a.output(), (b'a', b''))
        m = z.recv()
        self.assertEqual((m['op'], m['id'], m['status']), ('exited', a.id, 0))

    def test_malformed_requests_are_refused(self):
        z = Zygote(self)
        z.ready()
        hello = 'import sys\nsys.stdout.write("ok")\n'

        def pipes_closed(send):
            """send with the write end of a pipe; check that the zygote
            closed its copy (the read end sees end of file)."""
            r, w = os.pipe()
            try:
                send(w)
            finally:
                os.close(w)
            self.assertEqual(read_all(r), b'')

        # Answered with failed: a run request it cannot take.
        job = {'script': '/nonexistent.py', 'dir': '/', 'env': []}
        base = {'op': 'run'}
        for req, nfds, want_id in (
            (encode_run(dict(base, id=101), job), 2, 101),
            (encode_run(dict(base, id=102), job), 0, 102),
            (encode_run(dict(base, id=103), job), 4, 103),
            (encode_run(base, job), 3, None),
            (encode_run(dict(base, id='104'), job), 3, None),
            (encode_run(dict(base, id=True), job), 3, None),
            (encode_run(dict(base, id=105.0), job), 3, None),
            (json.dumps(dict(base, id=106, **job)).encode(), 3, 106),  # one object: no job after a header
            # Mount clones are for a sandboxed zygote's jobs only, and counted.
            (encode_run(dict(base, id=107, clones=1), job), 4, 107),
            (encode_run(dict(base, id=108, clones=1), job), 3, 108),
            (encode_run(dict(base, id=109, clones='1'), job), 3, 109),
            (encode_run(dict(base, id=110, clones=-1), job), 2, 110),
        ):
            with self.subTest(req=req, fds=nfds):
                def send(w):
                    z.send(req, [w] * nfds)
                if nfds:
                    pipes_closed(send)
                else:
                    send(None)
                m = z.recv()
                self.assertEqual(m, {'op': 'failed', 'id': want_id, 'error': 'malformed run request'})

        # Ignored: not a message the zygote knows. The next message it sends
        # is about the next job.
        for data in (b'not json', b'\xff\xfe', b'[1, 2]', b'"run"', b'null', b'{}', b'{"op": "frobnicate", "id": 1}',
                     b'{"op": "kill"}', b'{"op": "kill", "id": [1]}', b'{"op": 7}'):
            with self.subTest(data=data):
                pipes_closed(lambda w: z.send(data, [w, w, w]))
                z.send(data)
                self.assertEqual(z.finish(z.run(hello))[1:], (0, b'ok', b''))

    def test_started_again_when_the_spare_died(self):
        z = Zygote(self)
        zpid = z.ready()['pid']

        def children():
            out = []
            for name in os.listdir('/proc'):
                if name.isdigit():
                    st = proc_stat(int(name))
                    if st is not None and st[1] == zpid:
                        out.append(int(name))
            return out

        # The zygote forks a spare when it is idle; stop it, kill the spare,
        # and only then send a job: the zygote hands the job to the dead
        # spare, which it finds dead (the job is not lost), before it reaps it.
        spare = wait_until(children, 'the spare')[0]
        os.kill(zpid, signal.SIGSTOP)
        try:
            wait_until(lambda: proc_stat(zpid)[0] == 'T', 'the zygote to stop')
            os.kill(spare, signal.SIGKILL)
            wait_until(lambda: proc_stat(spare)[0] == 'Z', 'the spare to die')
            job = z.run(HELLO, stdin=b'x')
        finally:
            os.kill(zpid, signal.SIGCONT)
        m = z.recv()
        self.assertEqual(m, {'op': 'started', 'id': job.id, 'pid': spare})
        pid, status, out, err = z.finish(job)
        self.assertNotEqual(pid, spare)
        self.assertEqual((status, out, err), (0, b'out:x', b'err'))

    def test_end_of_file_kills_every_job(self):
        z = Zygote(self)
        z.ready()
        jobs = []
        for _ in range(2):
            job = z.run('import os, time\nos.fork()\nprint(os.getpid(), flush=True)\ntime.sleep(600)\n')
            m = z.recv()
            self.assertEqual((m['op'], m['id']), ('started', job.id))
            self.assertTrue(read_line(job.stdout))
            jobs.append(job)
        self.assertEqual(z.close(), 0)
        for job in jobs:
            # Every process of the job (and its fork) held the pipes.
            self.assertEqual(job.output()[1], b'')



def zygote_functions():
    """zygote.py's definitions, without running its _main."""
    body, tail = SOURCE.decode().rsplit('\n_main()', 1)
    if tail.strip():
        raise AssertionError('zygote.py does not end with _main(): %r' % tail)
    g = {'__name__': 'zygote_under_test'}
    exec(compile(body, ZYGOTE_PY, 'exec'), g)
    return g


def proc_status(pid):
    with open('/proc/%d/status' % pid) as f:
        return dict(line.split(':\t', 1) for line in f.read().splitlines() if ':\t' in line)


class CloseFdsTest(unittest.TestCase):
    """_close_fds leaves a process 0, 1, 2 and the descriptors it keeps,
    whichever way it closes the rest (close_range(2) over the gaps, or
    each descriptor /proc/self/fd lists)."""

    def test_keeps_only_what_it_is_told(self):
        for close_range in (True, False):
            with self.subTest(close_range=close_range):
                g = zygote_functions()
                g['_close_range_works'][0] = close_range
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        os.close(r)
                        fds = [os.open('/dev/null', os.O_RDONLY) for _ in range(40)]
                        high = os.dup2(fds[0], 900)
                        keep = {w, fds[7], fds[30], high}
                        g['_close_fds'](keep)
                        left = []
                        for fd in range(1024):
                            try:
                                os.fstat(fd)
                                left.append(fd)
                            except OSError:
                                pass
                        os.write(w, json.dumps([left, sorted(keep), g['_close_range_works'][0]]).encode())
                        code = 0
                    finally:
                        os._exit(code)
                os.close(w)
                data = read_all(r)
                _, st = os.waitpid(pid, 0)
                self.assertEqual(st, 0, data)
                left, keep, used = json.loads(data)
                self.assertEqual([fd for fd in left if fd > 2], keep)
                self.assertEqual(used, close_range)


class KeeperTest(unittest.TestCase):
    """The keeper a job's process leaves its address space to
    (_keep_address_space): machine code that must hold none of the job's
    descriptors nor its working directory, take no signal but SIGKILL, and
    die as the job's process ends."""

    def test_keeper_holds_nothing_and_takes_no_signal(self):
        g = zygote_functions()
        keeper = g['_keeper']()
        if os.uname().machine != 'x86_64':
            self.assertIsNone(keeper, 'a keeper on %s' % os.uname().machine)
            return
        self.assertIsNotNone(keeper)
        g['_KEEPER'] = keeper
        report_r, report_w = os.pipe()
        with tempfile.TemporaryDirectory() as d:
            m = os.fork()
            if m == 0:
                # M: the keeper's reaper once the job's process (J) is gone.
                code = 1
                try:
                    os.close(report_r)
                    os.write(report_w, json.dumps(self.keeper_of_a_job(g, d)).encode())
                    code = 0
                finally:
                    os._exit(code)
            os.close(report_w)
            data = read_all(report_r)
            _, st = os.waitpid(m, 0)
        self.assertEqual(st, 0, data)
        r = json.loads(data)
        self.assertGreater(r['keeper'], 0)
        self.assertEqual(r['mask_after'], r['mask_before'], "the job's signal mask was not given back")
        self.assertEqual(r['fds'], [], 'the keeper holds descriptors')
        self.assertEqual(r['cwd'], '/')
        every = (1 << 64) - 1
        unblockable = (1 << (signal.SIGKILL - 1)) | (1 << (signal.SIGSTOP - 1))
        self.assertEqual(int(r['sigblk'], 16), every & ~unblockable, 'signals the keeper does not block')
        # It holds the job's address space: an interpreter's pages, not a
        # few of its own.
        self.assertGreater(int(r['rss_kb']), 1024)
        self.assertEqual(r['reaped'], signal.SIGKILL)

    @staticmethod
    def keeper_of_a_job(g, d):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
        r, w = os.pipe()
        go_r, go_w = os.pipe()
        held = os.open(d, os.O_RDONLY)  # a descriptor the job still holds at its end
        j = os.fork()
        if j == 0:
            try:
                os.close(go_w)
                os.chdir(d)
                before = proc_status(os.getpid())['SigBlk']
                pid = g['_keep_address_space']()
                after = proc_status(os.getpid())['SigBlk']
                os.write(w, json.dumps([pid, before, after]).encode())
                os.close(w)
                os.read(go_r, 1)  # J ends once the keeper has been looked at
            finally:
                os._exit(0)
        os.close(w)
        os.close(go_r)
        os.close(held)
        # EOF once J has written and the keeper has closed its copy of w.
        pid, before, after = json.loads(read_all(r))
        deadline = time.monotonic() + TIMEOUT
        while True:
            fds = os.listdir('/proc/%d/fd' % pid)
            cwd = os.readlink('/proc/%d/cwd' % pid)
            st = proc_status(pid)
            if (not fds and cwd == '/' and st['State'].startswith('S')) or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        # J's end is the keeper's (its parent-death signal): nothing here
        # kills it unless it outlives the deadline.
        os.close(go_w)
        os.waitpid(j, 0)
        deadline = time.monotonic() + TIMEOUT
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                reaped = os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                reaped = 'outlived the job'
                break
            time.sleep(0.01)
        return {'keeper': pid, 'mask_before': before, 'mask_after': after, 'fds': fds, 'cwd': cwd,
                'sigblk': st['SigBlk'], 'rss_kb': st['VmRSS'].split()[0], 'reaped': reaped}



class WaitStatusTest(unittest.TestCase):
    """The zygote tells the worker a job's status from waitid's report,
    before it reaps the job (_wait_status): the same as waitpid's."""

    def test_wait_status_is_waitpids(self):
        wait_status = zygote_functions()['_wait_status']
        ends = [('exit', 0), ('exit', 3), ('exit', 255), ('signal', signal.SIGKILL),
                ('signal', signal.SIGTERM), ('signal', signal.SIGINT)]
        for how, n in ends:
            pid = os.fork()
            if pid == 0:
                # The child never returns into the test runner.
                try:
                    if how == 'signal':
                        if n != signal.SIGKILL:  # whose disposition cannot be set
                            signal.signal(n, signal.SIG_DFL)
                        os.kill(os.getpid(), n)
                finally:
                    os._exit(n if how == 'exit' else 125)
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
            _, status = os.waitpid(pid, 0)
            self.assertEqual(wait_status(info), status, '%s %d' % (how, n))



class JobWaitingTest(unittest.TestCase):
    """A spare forked for a job that is already on its socket skips the
    rehearsal (_job_waiting), which would only delay that job."""

    def test_job_waiting(self):
        job_waiting = zygote_functions()['_job_waiting']
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with a, b:
            self.assertFalse(job_waiting(b))
            a.send(b'{"op": "run"}')
            self.assertTrue(job_waiting(b))
            self.assertEqual(b.recv(64), b'{"op": "run"}')
            self.assertFalse(job_waiting(b))


if __name__ == '__main__':
    unittest.main()
