# Makes a sandboxed job's process write, on its stderr, when each step of its set-up ended (µs since its request
# came; 'environment' ends the /tmp size, the descriptors closed and the environment set), for
# worker/runner/testdata/setup_steps.py. Run it in a scratch clone, from the repository's root, and never commit the
# result:  python3 worker/runner/testdata/setup_steps_patch.py && go build -o /tmp/codexec-steps ./cmd/codexec
p = 'worker/runner/zygote.py'
s = open(p).read()


def rep(old, new):
    global s
    assert s.count(old) == 1, old
    s = s.replace(old, new, 1)


T = "_T.append((%r, time.perf_counter()))"
rep("""        req = json.loads(msg)
        _setup_job(req, fds, net)""", """        req = json.loads(msg)
        global _T
        _T = [('recv', time.perf_counter())]
        _setup_job(req, fds, net)
        """ + T % 'filter')
rep("""        code, interrupted = _run_main(req['script'])
        done = True""", """        """ + T % 'site' + """
        code, interrupted = _run_main(req['script'])
        """ + T % 'run' + """
        os.write(2, (' '.join('%s=%.0f' % (n, (t - _T[0][1]) * 1e6) for n, t in _T) + '\\n').encode())
        done = True""")
rep("""    if _clone_mode:
        _attach_clones(binds, clones)""", """    if _clone_mode:
        _attach_clones(binds, clones)
        """ + T % 'directories')
rep("""        _bind_from_hidden_roots(binds)
        _detach_hidden_roots()""", """        _bind_from_hidden_roots(binds)
        _detach_hidden_roots()
        """ + T % 'directories')
rep("""    _join_cgroups(c)
    size = c.get('tmp_size')""", """    _join_cgroups(c)
    """ + T % 'cgroups' + """
    size = c.get('tmp_size')""")
rep("""    for res, soft, hard in req.get('rlimits') or ():
        resource.setrlimit(res, (soft, hard))
    if confine is not None:
        _drop_privileges(confine)""", """    """ + T % 'environment' + """
    for res, soft, hard in req.get('rlimits') or ():
        resource.setrlimit(res, (soft, hard))
    if confine is not None:
        _drop_privileges(confine)
        """ + T % 'uid')
open(p, 'w').write(s)
