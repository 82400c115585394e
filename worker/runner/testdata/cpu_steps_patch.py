# Makes each job's process write, on its stderr, the CPU time (user and system, µs, of its one thread: a process
# clock is read at the scheduler's ticks only once the job's RLIMIT_CPU arms a process timer) that each step of its life took
# from its fork to its first line of the job's code: the fork's own return ("at fork": CPython's after-fork hooks
# and the first writes to the pages they touch), the spare's namespaces and mounts, the job's set-up, each mount and
# each libc call, and the total ("total to code"). Steps nest: a function's figure includes the calls it makes. For
# worker/runner/testdata/cpu_steps.py. Run it in a scratch clone, from the repository's root, and never commit the
# result:  python3 worker/runner/testdata/cpu_steps_patch.py && go build -o /tmp/codexec-cpu ./cmd/codexec
p = 'worker/runner/zygote.py'
s = open(p).read()
timed = ('_enter_namespaces', '_own_dev', '_own_session_keyring', '_hide_roots', '_hide_cgroup_dirs', '_own_proc',
         '_rehearse_job', '_forget_other_jobs', '_close_fds', '_receive_job', '_confine', '_attach_clones',
         '_join_cgroups', '_drop_privileges', '_install_seccomp', '_setup_job', '_loopback_up', '_bind_fd')
instrument = r'''
import time as _t
_CPU = {}


def _timed(name, fn):
    def w(*a, **k):
        t = _t.thread_time_ns()
        try:
            return fn(*a, **k)
        finally:
            _CPU[name] = _CPU.get(name, 0) + _t.thread_time_ns() - t
    return w


for _n in %r:
    globals()[_n] = _timed(_n, globals()[_n])
_orig_mount, _orig_libc_call, _orig_prepare_child, _orig_run_site_code = _mount, _libc_call, _prepare_child, _run_site_code


def _mount(source, target, fstype, flags, data):
    t = _t.thread_time_ns()
    try:
        return _orig_mount(source, target, fstype, flags, data)
    finally:
        _CPU['mount ' + str(target)] = _CPU.get('mount ' + str(target), 0) + _t.thread_time_ns() - t


def _libc_call(name, *args):
    t = _t.thread_time_ns()
    try:
        return _orig_libc_call(name, *args)
    finally:
        if name != 'mount':
            _CPU['libc ' + name] = _CPU.get('libc ' + name, 0) + _t.thread_time_ns() - t


def _prepare_child(z, sock):
    _CPU.clear()
    _CPU['at fork'] = _t.thread_time_ns()  # a forked child's CPU time starts at 0
    return _orig_prepare_child(z, sock)


def _run_site_code():
    _CPU['total to code'] = _t.thread_time_ns()
    os.write(2, ('CPUSTEPS ' + json.dumps(_CPU) + '\n').encode())
    return _orig_run_site_code()

''' % (timed,)
body, tail = s.rstrip().rsplit('\n_main()', 1)
assert not tail.strip(), 'zygote.py no longer ends with _main()'
open(p, 'w').write(body + '\n' + instrument + '\n_main()\n')
