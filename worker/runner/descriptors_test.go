//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listFDsJob prints what each of the job's descriptors names, as JSON
// {"fd": "target"}. The listing's own descriptor is closed by the time its
// link is read, so it is left out.
const listFDsJob = `
import json, os
fds = {}
for name in os.listdir('/proc/self/fd'):
    try:
        fds[name] = os.readlink('/proc/self/fd/' + name)
    except OSError:
        pass
print(json.dumps(fds))
`

// forgeJob writes what a forged exit report could look like (the bare
// decimal status the zygote's report socket once carried, and messages of
// the control protocol) on every descriptor it may hold, listed or not,
// then fails its own way. The result must be the failure.
const forgeJob = `
import os, sys
forged = [b'0', b'0\n', b'{"op":"exited","id":1,"status":0}', b'{"op":"exited","id":2,"status":0}']
for fd in sorted(set(range(3, 1100)) | {int(n) for n in os.listdir('/proc/self/fd')}):
    for msg in forged:
        try:
            os.write(fd, msg)
        except OSError:
            break
print('forged')
sys.stdout.flush()
`

var forgeEndings = []struct{ name, src string }{
	{"exit 1", "sys.exit(1)\n"},
	{"raise", "raise RuntimeError('the real outcome')\n"},
	{"os._exit(1)", "os._exit(1)\n"},
}

// checkOnlyStdio fails t unless the job of out held descriptors 0, 1 and 2
// and nothing else: a descriptor left by the zygote or the sandbox's set-up
// (the roots of every session's directories, a socket to the zygote) is a
// way out of the job's confinement or into its result.
func checkOnlyStdio(t *testing.T, out Outcome) {
	t.Helper()
	if out.ExitCode != 0 {
		t.Fatalf("the listing failed: exit %d signal %q\n%s", out.ExitCode, out.Signal, out.Stderr)
	}
	var fds map[string]string
	if err := json.Unmarshal(out.Stdout, &fds); err != nil {
		t.Fatalf("listing %q: %v", out.Stdout, err)
	}
	if got := slices.Sorted(maps.Keys(fds)); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Errorf("the job holds descriptors %v, want only 0, 1 and 2", fds)
	}
}

// checkForgeryFails runs forgeJob with each ending through run and fails t
// unless the outcome is the job's real one.
func checkForgeryFails(t *testing.T, spec func(t testing.TB, src string) Spec, run func(t testing.TB, s Spec) Outcome) {
	t.Helper()
	for _, e := range forgeEndings {
		t.Run(e.name, func(t *testing.T) {
			out := run(t, spec(t, forgeJob+e.src))
			if out.ExitCode != 1 || out.Signal != "" {
				t.Errorf("a job that forged a report of success and then failed (%s) got exit %d signal %q, want exit 1\nstdout: %.200q\nstderr: %s",
					e.name, out.ExitCode, out.Signal, out.Stdout, out.Stderr)
			}
		})
	}
}

// A job holds stdin, stdout and stderr only, however it runs: not even a
// descriptor the worker holds without close-on-exec (one it inherited).
func TestJobHoldsOnlyStdio(t *testing.T) {
	inherited, err := unix.Open(os.DevNull, unix.O_RDONLY, 0) // no O_CLOEXEC
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(inherited) })
	t.Run("spawn", func(t *testing.T) {
		tb := setup(t)
		checkOnlyStdio(t, run(t, tb.spec(t, listFDsJob)))
	})
	t.Run("zygote", func(t *testing.T) {
		tb := setup(t)
		checkOnlyStdio(t, zrun(t, zygote(t), tb.spec(t, listFDsJob)))
	})
}

// A sandboxed job holds stdin, stdout and stderr only: not the O_PATH
// descriptors on the roots of every session's directories and scripts that
// its set-up binds its own directories from, in a sandboxed zygote, a
// one-shot one (RunSandboxed) or one started ahead (Fresh).
func TestSandboxedJobHoldsOnlyStdio(t *testing.T) {
	l := newSandboxLayout(t)
	t.Run("zygote", func(t *testing.T) {
		z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
		checkOnlyStdio(t, zrun(t, z, l.spec(t, "a", testUIDA, listFDsJob)))
	})
	t.Run("one-shot", func(t *testing.T) {
		out, err := RunSandboxed(context.Background(), l.cfg, l.spec(t, "a", testUIDA, listFDsJob))
		if err != nil {
			t.Fatal(err)
		}
		checkOnlyStdio(t, out)
	})
	t.Run("fresh", func(t *testing.T) {
		f := NewFresh(l.cfg, nil)
		defer f.Stop(context.Background())
		for range 2 { // the first in a new one-shot, the second in one started ahead
			out, err := f.Run(context.Background(), l.spec(t, "a", testUIDA, listFDsJob))
			if err != nil {
				t.Fatal(err)
			}
			checkOnlyStdio(t, out)
		}
	})
}

// A job's exit status is what the kernel says of its process, whatever the
// job writes wherever it can.
func TestJobCannotForgeItsResult(t *testing.T) {
	t.Run("spawn", func(t *testing.T) {
		tb := setup(t)
		checkForgeryFails(t, tb.spec, run)
	})
	t.Run("zygote", func(t *testing.T) {
		tb := setup(t)
		z := zygote(t)
		checkForgeryFails(t, tb.spec, func(t testing.TB, s Spec) Outcome { return zrun(t, z, s) })
	})
}

func TestSandboxedJobCannotForgeItsResult(t *testing.T) {
	l := newSandboxLayout(t)
	spec := func(t testing.TB, src string) Spec { return l.spec(t, "a", testUIDA, src) }
	t.Run("zygote", func(t *testing.T) {
		z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
		checkForgeryFails(t, spec, func(t testing.TB, s Spec) Outcome { return zrun(t, z, s) })
	})
	t.Run("one-shot", func(t *testing.T) {
		checkForgeryFails(t, spec, func(t testing.TB, s Spec) Outcome {
			out, err := RunSandboxed(context.Background(), l.cfg, s)
			if err != nil {
				t.Fatal(err)
			}
			return out
		})
	})
}

// What ending a job costs in an unsandboxed zygote, now that its status
// comes from waitpid (after the teardown of its address space), not from a
// report the job wrote before it: print(1), and a job that still holds 256
// MiB when it exits. BenchmarkSandboxedZygote is the sandboxed twin.
func BenchmarkZygoteJobEnd(b *testing.B) {
	tb := setup(b)
	z := startZygote(b, ZygoteConfig{Env: ChildEnv(nil, "", "", nil, nil), Preload: DefaultPreload})
	benchJobEnd(b, z, tb.spec)
}

// benchJobEnd reports the p50 of a job that prints 1 in z, small and
// holding 256 MiB at its exit (whose teardown is large).
func benchJobEnd(b *testing.B, z *Zygote, spec func(b testing.TB, src string) Spec) {
	for _, bb := range []struct{ name, src string }{
		{"print1", "print(1)\n"},
		{"holds256MiB", "import sys\nsys.modules['held'] = bytearray(256 << 20)\nprint(1)\n"},
	} {
		b.Run(bb.name, func(b *testing.B) {
			s := spec(b, bb.src)
			var took []time.Duration
			for b.Loop() {
				t0 := time.Now()
				out, err := z.Run(context.Background(), s)
				took = append(took, time.Since(t0))
				if err != nil || out.ExitCode != 0 || string(out.Stdout) != "1\n" {
					b.Fatalf("Run: %+v, %v", out, err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		})
	}
}
