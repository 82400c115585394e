# codexec context: a live interpreter that keeps its variables between calls.
#
# The worker (worker/runner/interp_linux.go) runs this file as a job's
# script, forked from the environment's warm interpreter (zygote.py) like any
# job, in the same sandbox, cgroups and rlimits. What differs is fd 0: a
# SOCK_SEQPACKET socket to the worker instead of /dev/null. This file moves it
# out of the way (fd 0 becomes /dev/null, as for a job) and serves requests on
# it, one datagram each:
#
#   worker -> here:  b'C' + a piece of the next cell's source (UTF-8)
#                    {"op": "exec", "seq": N}     run the pieces as cell N
#                    {"op": "interrupt", "seq": N} KeyboardInterrupt in cell N
#   here -> worker:  {"op": "ready"}              once, before any request
#                    {"op": "done", "seq": N, "error": "...", "interrupted": bool}
#
# A cell runs like a notebook's: its statements in one namespace that lives
# as long as the context; when the last statement is a bare expression its
# value goes through sys.displayhook (repr on stdout, as the interactive
# interpreter shows it). print writes to stdout and an exception's traceback
# to stderr as in a script; stdout and stderr are the pipes the worker reads,
# and every byte a cell wrote is in them before its "done" goes out.
#
# Nothing here is trusted by the worker beyond what the cell's own output
# is: the cell's code runs in this process and could write any datagram on
# the socket. How the context ended (killed, its process died) the worker
# learns from the zygote, never from here.

import ast
import builtins
import json
import linecache
import os
import signal
import socket
import sys
import threading
import traceback
import types

_THIS = __file__
_MAX_MSG = 1 << 17


def _send(sock, obj):
    sock.send(json.dumps(obj, separators=(',', ':')).encode())


class _Channel:
    """The socket, read by a thread of its own: an interrupt must reach the
    main thread while a cell runs there."""

    def __init__(self, sock):
        self.sock = sock
        self.cond = threading.Condition()
        self.requests = []
        self.closed = False
        self.running = 0  # the seq of the cell that runs, 0 between cells
        self.interrupted = 0  # the seq of the last cell asked to stop
        self.main = threading.main_thread().ident

    def read_loop(self):
        while True:
            try:
                msg = self.sock.recv(_MAX_MSG)
            except InterruptedError:
                continue
            except OSError:
                msg = b''
            if not msg:
                with self.cond:
                    self.closed = True
                    self.cond.notify()
                return
            if msg[:1] == b'C':
                self.put(msg)
                continue
            try:
                req = json.loads(msg)
            except ValueError:
                continue
            if not isinstance(req, dict):
                continue
            if req.get('op') == 'interrupt':
                self.interrupt(req.get('seq'))
            else:
                self.put(req)

    def put(self, item):
        with self.cond:
            self.requests.append(item)
            self.cond.notify()

    def interrupt(self, seq):
        # Set first, then look: the main thread sets running, then looks at
        # interrupted (start_cell), so one of the two sees the other.
        self.interrupted = seq
        if self.running == seq and seq:
            try:
                signal.pthread_kill(self.main, signal.SIGINT)
            except OSError:
                pass

    def get(self):
        with self.cond:
            while not self.requests and not self.closed:
                self.cond.wait()
            if self.requests:
                return self.requests.pop(0)
            return None


def _ignore(signum, frame):
    pass


class _Context:
    def __init__(self, chan):
        self.chan = chan
        # The cells' namespace is a __main__ module of its own, as a
        # script's, without this file's names.
        main = types.ModuleType('__main__')
        main.__builtins__ = builtins
        sys.modules['__main__'] = main
        self.ns = main.__dict__
        self.user_sigint = signal.default_int_handler
        self.source = []

    def serve(self):
        # Between cells an interrupt that came late is dropped.
        signal.signal(signal.SIGINT, _ignore)
        _send(self.chan.sock, {'op': 'ready'})
        while True:
            req = self.chan.get()
            if req is None:
                return
            if isinstance(req, bytes):
                self.source.append(req[1:])
                continue
            if req.get('op') != 'exec' or type(req.get('seq')) is not int:
                continue
            seq = req['seq']
            src = b''.join(self.source)
            self.source = []
            reply = self.run_cell(seq, src)
            _flush()
            reply['op'], reply['seq'] = 'done', seq
            _send(self.chan.sock, reply)

    def run_cell(self, seq, src):
        error, interrupted = '', False
        try:
            try:
                code = self.compile(seq, src.decode('utf-8', 'replace'))
                signal.signal(signal.SIGINT, self.user_sigint)
                self.chan.running = seq
                if self.chan.interrupted == seq:
                    raise KeyboardInterrupt
                for c in code:
                    exec(c, self.ns)
            finally:
                self.chan.running = 0
                h = signal.getsignal(signal.SIGINT)
                signal.signal(signal.SIGINT, _ignore)
                if h is not _ignore and h is not None:
                    self.user_sigint = h
        except BaseException as e:  # SystemExit too: the context goes on
            interrupted = isinstance(e, KeyboardInterrupt)
            error = _describe(e)
            _print_exception(e)
        return {'error': error, 'interrupted': interrupted}

    def compile(self, seq, text):
        """The cell's code objects: its statements, then its last one in
        'single' mode when it is a bare expression (sys.displayhook shows
        its value)."""
        name = '<cell %d>' % seq
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        tree = ast.parse(text, name, 'exec')
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Interactive(body=[tree.body.pop()])
        out = [compile(tree, name, 'exec', dont_inherit=True)]
        if last is not None:
            out.append(compile(last, name, 'single', dont_inherit=True))
        return out


def _describe(e):
    if isinstance(e, SystemExit):
        return 'SystemExit(%r)' % (e.code,)
    msg = str(e)
    return type(e).__name__ + (': ' + msg if msg else '')


def _print_exception(e):
    """The traceback as a script's, without this file's frames."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in (_THIS, '<codexec-zygote>'):
        tb = tb.tb_next
    e.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(e), e, tb
    if isinstance(e, SystemExit):
        return
    try:
        traceback.print_exception(type(e), e, tb, file=sys.stderr)
    except BaseException:
        pass


def _flush():
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None and not f.closed:
                f.flush()
        except BaseException:
            pass


def _main():
    # fd 0 is the worker's socket: keep it out of the cells' way (a cell
    # reading stdin reads /dev/null, as a job does).
    sock = socket.socket(fileno=os.dup(0))
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    except OSError:
        pass
    chan = _Channel(sock)
    threading.Thread(target=chan.read_loop, name='codexec-context', daemon=True).start()
    ctx = _Context(chan)
    ctx.serve()


_main()
