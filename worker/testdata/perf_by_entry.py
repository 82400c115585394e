# Where one command's processes spend their CPU, by the kernel entry each sample came through: a page fault, a
# system call (by its handler), the return to user space (signals, a process's exit by a signal), or user code.
# Reads `perf script` of a `perf record -a -g` run and reports, for the command name COMM (default python, the
# zygote and its jobs), the share of its samples under each entry, and the share of all samples per command.
#
#     perf record -a -g -F 1999 -o /tmp/perf.data -- env VENV=... N=50 C=8 D=10 R=1 \
#         python3 worker/testdata/dev_cpu_bench.py on=bin/codexec:require
#     perf script -i /tmp/perf.data -F comm,ip,sym > /tmp/perf.txt
#     python3 worker/testdata/perf_by_entry.py /tmp/perf.txt [COMM]
import collections
import sys

GLUE = {'entry_SYSCALL_64_after_hwframe', 'do_syscall_64', 'x64_sys_call', 'asm_exc_page_fault', 'ret_from_fork_asm',
        'ret_from_fork', 'asm_sysvec_apic_timer_interrupt', 'asm_sysvec_call_function_single', 'asm_common_interrupt',
        'asm_sysvec_reschedule_ipi'}


def main():
    path = sys.argv[1]
    want = sys.argv[2] if len(sys.argv) > 2 else 'python'
    by_comm, by_entry = collections.Counter(), collections.Counter()
    comm, frames = None, []

    def flush():
        if comm is None:
            return
        by_comm[comm] += 1
        if comm != want:
            return
        kernel = [sym for addr, sym in frames if addr.startswith('ffff')]  # innermost first
        if not kernel:
            by_entry['<user code>'] += 1
            return
        outer = [sym for sym in kernel if sym not in GLUE]
        by_entry[outer[-1] if outer else kernel[-1]] += 1

    for line in open(path, errors='replace'):
        if line[:1] in (' ', '\t'):
            parts = line.split()
            if len(parts) >= 2:
                frames.append((parts[0], parts[1]))
        else:
            flush()
            comm, frames = (line.split()[0] if line.strip() else None), []
    flush()
    total = sum(by_comm.values())
    print('all samples %d' % total)
    for name, n in by_comm.most_common(8):
        print('  %6.2f%%  %s' % (100.0 * n / total, name))
    n = by_comm[want]
    print('%s: %d samples, by kernel entry' % (want, n))
    for name, k in by_entry.most_common(20):
        print('  %6.2f%%  %s' % (100.0 * k / max(n, 1), name))


main()
