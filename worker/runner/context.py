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
# An interrupt is the one request that comes while a cell runs: the socket
# is O_ASYNC, owned by the main thread, so its arrival raises SIGIO there;
# the handler takes it off the socket and raises SIGINT, whose handler (the
# default one, KeyboardInterrupt, unless the cell set its own) stops the
# cell. Between cells SIGIO is ignored and the main thread reads the socket.
#
# Nothing here is trusted by the worker beyond what the cell's own output
# is: the cell's code runs in this process and could write any datagram on
# the socket. How the context ended (killed, its process died) the worker
# learns from the zygote, never from here.

import ast
import builtins
import fcntl
import json
import linecache
import os
import signal
import socket
import struct
import sys
import threading
import traceback
import types

_THIS = __file__
_MAX_MSG = 1 << 17


def _send(sock, obj):
    sock.send(json.dumps(obj, separators=(',', ':')).encode())


# fcntl(2) commands and constants (Linux): a signal to one thread on input.
_F_SETSIG = 10
_F_SETOWN_EX = 15
_F_OWNER_TID = 0


class _Channel:
    """The socket. The main thread reads it between cells; while a cell
    runs, input on it raises SIGIO in the main thread (O_ASYNC, owned by that
    thread), whose handler takes an interrupt for the cell off the socket
    and raises SIGINT: no second thread, no wakeup of one on a call's path."""

    def __init__(self, sock):
        self.sock = sock
        self.running = 0  # the seq of the cell that runs, 0 between cells
        fd = sock.fileno()
        fcntl.fcntl(fd, _F_SETOWN_EX, struct.pack('ii', _F_OWNER_TID, threading.get_native_id()))
        fcntl.fcntl(fd, _F_SETSIG, signal.SIGIO)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        signal.signal(signal.SIGIO, signal.SIG_IGN)

    def get(self):
        """The next request: bytes (a piece of source) or a dict; None at
        the end of the channel."""
        while True:
            try:
                msg = self.sock.recv(_MAX_MSG)
            except OSError:
                return None
            if not msg:
                return None
            if msg[:1] == b'C':
                return msg
            try:
                req = json.loads(msg)
            except ValueError:
                continue
            if isinstance(req, dict) and req.get('op') != 'interrupt':
                return req  # an interrupt between cells came too late: dropped

    def start(self, seq):
        self.running = seq
        signal.signal(signal.SIGIO, self.on_input)
        self.on_input(signal.SIGIO, None)  # an interrupt that came before the handler

    def stop(self):
        signal.signal(signal.SIGIO, signal.SIG_IGN)
        self.running = 0

    def on_input(self, signum, frame):
        while self.running:
            try:
                msg = self.sock.recv(_MAX_MSG, socket.MSG_DONTWAIT | socket.MSG_PEEK)
            except OSError:
                return
            if not msg:
                return
            try:
                req = json.loads(msg) if msg[:1] == b'{' else None
            except ValueError:
                req = None
            if not isinstance(req, dict) or req.get('op') != 'interrupt':
                return  # not for this cell: the main thread reads it after
            self.sock.recv(_MAX_MSG, socket.MSG_DONTWAIT)
            if req.get('seq') == self.running:
                signal.raise_signal(signal.SIGINT)


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
                self.chan.start(seq)
                for c in code:
                    exec(c, self.ns)
            finally:
                self.chan.stop()
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
    """'Type: message', at most 1000 characters (the traceback has it all)."""
    try:
        if isinstance(e, SystemExit):
            text = 'SystemExit(%r)' % (e.code,)
        else:
            msg = str(e)
            text = type(e).__name__ + (': ' + msg if msg else '')
    except BaseException:
        text = type(e).__name__
    return text if len(text) <= 1000 else text[:997] + '...'


def _print_exception(e):
    """The traceback as a script's, without this file's frames: those
    that ran the cell, before it, and the interrupt's handler (on_input),
    after it, where a timeout's KeyboardInterrupt is raised."""
    ours = (_THIS, '<codexec-zygote>')
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    last, t = None, tb
    while t is not None:
        if t.tb_frame.f_code.co_filename not in ours:
            last = t
        t = t.tb_next
    if last is not None:
        last.tb_next = None
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
    ctx = _Context(_Channel(sock))
    ctx.serve()


_main()
