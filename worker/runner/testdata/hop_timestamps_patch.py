# Adds temporary CLOCK_MONOTONIC timestamps to the worker's Zygote.Run, the zygote, the spare and the job's process,
# for worker/runner/testdata/hop_timestamps.py. Run it in a scratch clone, from the repository's root, and never
# commit the result:  python3 worker/runner/testdata/hop_timestamps_patch.py && go build -o /tmp/codexec-ts ./cmd/codexec
import sys
p='worker/runner/zygote.py'
s=open(p).read()
def rep(old,new):
    global s
    assert s.count(old)==1, old
    s=s.replace(old,new,1)
rep("""        n, anc, flags, _ = self.ctl.recvmsg_into([_BUF], _ANC_SPACE)""","""        n, anc, flags, _ = self.ctl.recvmsg_into([_BUF], _ANC_SPACE)
        _TS.append(('z_recv', time.monotonic_ns()))""")
rep("""                break
            except OSError:
                # The spare died waiting""","""                _TS.append(('z_handed', time.monotonic_ns()))
                break
            except OSError:
                # The spare died waiting""")
rep("""        job.done = True
        self.ctl.send(_exited(job.id, status))""","""        job.done = True
        _TS.append(('z_finish', time.monotonic_ns()))
        self.ctl.send(_exited(job.id, status))
        _TS.append(('z_exited_sent', time.monotonic_ns()))
        os.write(2, ('TSZ ' + ' '.join('%s=%d' % x for x in _TS) + '\\n').encode()); del _TS[:]""")
rep("""            pid = info.si_pid
            job = self.jobs.get(pid)""","""            pid = info.si_pid
            _TS.append(('z_sigchld', time.monotonic_ns()))
            job = self.jobs.get(pid)""")
rep("""        msg, fds = _receive_job(job_sock, 3 if z.nethome is None else 4)
        received = True""","""        msg, fds = _receive_job(job_sock, 3 if z.nethome is None else 4)
        _TS[:] = [('j_recv', time.monotonic_ns())]
        received = True""")
rep("""        _setup_job(req, fds)
        _run_site_code()
        if _richout is not None:
            _richout.job_start()
        code, interrupted = _run_main(req['script'])""","""        _setup_job(req, fds)
        _TS.append(('j_setup', time.monotonic_ns()))
        _run_site_code()
        if _richout is not None:
            _richout.job_start()
        _TS.append(('j_richout', time.monotonic_ns()))
        code, interrupted = _run_main(req['script'])
        _TS.append(('j_end', time.monotonic_ns()))
        os.write(2, ('TSJ ' + ' '.join('%s=%d' % x for x in _TS) + '\\n').encode())""")
rep("""        code = compile(source, path, 'exec', dont_inherit=True)
        del source
        exec(code, d)""","""        _TS.append(('j_read', time.monotonic_ns()))
        code = compile(source, path, 'exec', dont_inherit=True)
        del source
        _TS.append(('j_exec', time.monotonic_ns()))
        exec(code, d)
        _TS.append(('j_execd', time.monotonic_ns()))""")

# The sandboxed set-up's steps.
rep("""    confine = req.get('confine')
    if confine is None:
        os.chdir(req['dir'])
    else:
        _confine(confine)
        _close_hidden()""","""    _TS.append(('s_fds', time.monotonic_ns()))
    confine = req.get('confine')
    if confine is None:
        os.chdir(req['dir'])
    else:
        _confine(confine)
        _TS.append(('s_confine', time.monotonic_ns()))
        _close_hidden()""")
rep("""    _close_fds()
    env = {}""","""    _close_fds()
    _TS.append(('s_closefds', time.monotonic_ns()))
    env = {}""")
rep("""    for res, soft, hard in req.get('rlimits') or ():
        resource.setrlimit(res, (soft, hard))
    if confine is not None:
        _drop_privileges(confine)
        os.chdir(req['dir'])  # the session's uid may enter it; root may not
    if _seccomp is not None:
        _install_seccomp()""","""    for res, soft, hard in req.get('rlimits') or ():
        resource.setrlimit(res, (soft, hard))
    _TS.append(('s_envrl', time.monotonic_ns()))
    if confine is not None:
        _drop_privileges(confine)
        os.chdir(req['dir'])  # the session's uid may enter it; root may not
    _TS.append(('s_drop', time.monotonic_ns()))
    if _seccomp is not None:
        _install_seccomp()""")
rep("""            _bind_fd(src, path, write)
        finally:
            os.close(src)
    _detach_hidden_roots()
    _join_cgroups(c)""","""            _bind_fd(src, path, write)
        finally:
            os.close(src)
    _TS.append(('c_binds', time.monotonic_ns()))
    _detach_hidden_roots()
    _TS.append(('c_detach', time.monotonic_ns()))
    _join_cgroups(c)
    _TS.append(('c_cgroups', time.monotonic_ns()))""")
s=s.replace("def _main():\n","_TS = []\n\ndef _main():\n",1)
open(p,'w').write(s)
p='worker/runner/zygote_linux.go'
s=open(p).read()
s=s.replace("""	start := time.Now()
	_, _, err = z.conn.WriteMsgUnix(""","""	start := time.Now()
	tsSend := monoNS()
	var tsExited int64
	defer func() { z.log.Warn("TSG", "send", tsSend, "exited", tsExited, "ret", monoNS()) }()
	_, _, err = z.conn.WriteMsgUnix(""")
s=s.replace("""		case opExited:
			status, exited = m.Status, true""","""		case opExited:
			status, exited = m.Status, true
			tsExited = monoNS()""")
s+='''
func monoNS() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}
'''
open(p,'w').write(s)
