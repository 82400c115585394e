//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/worker/sandbox"
	"golang.org/x/sys/unix"
)

// sandboxLayout is a worker's layout in miniature: roots of the sessions'
// working directories and scripts, and two sessions with uids of their own.
type sandboxLayout struct {
	python            string
	sessions, scripts string
	shared            string // a read-only directory of the sandbox, under /tmp like the others
	cfg               *SandboxConfig
}

const testUIDA, testUIDB = 2000000101, 2000000102

func newSandboxLayout(t testing.TB) *sandboxLayout {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the sandbox tests need root (CI runs as root)")
		}
		t.Skip("the sandbox needs root")
	}
	box, err := sandbox.Probe(context.Background(), sandbox.Config{})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs a working sandbox: %v", err)
		}
		t.Skip(err)
	}
	p, err := python()
	if err != nil {
		t.Skipf("no python3 to run jobs with: %v", err)
	}
	root := t.TempDir()
	l := &sandboxLayout{python: p, sessions: filepath.Join(root, "sessions"), scripts: filepath.Join(root, "scripts"), shared: filepath.Join(root, "shared")}
	for _, d := range []string{l.sessions, l.scripts, l.shared} {
		if err := os.Mkdir(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(l.shared, "kept.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.cfg = &SandboxConfig{
		Box:    box,
		Mounts: []sandbox.Mount{{Path: l.sessions, Write: true}, {Path: l.scripts}, {Path: l.shared}},
		Hidden: []string{l.sessions, l.scripts},
	}
	for _, s := range []struct {
		name string
		uid  int
	}{{"a", testUIDA}, {"b", testUIDB}} {
		for _, d := range []string{filepath.Join(l.sessions, s.name), filepath.Join(l.scripts, s.name)} {
			if err := os.Mkdir(d, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(d, s.uid, s.uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return l
}

// spec writes src as a script of session name and returns the Spec that
// runs it confined to that session.
func (l *sandboxLayout) spec(t testing.TB, session string, uid int, src string) Spec {
	t.Helper()
	script := filepath.Join(l.scripts, session, "job.py")
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(l.sessions, session)
	return Spec{
		Python: l.python, Script: script, Dir: dir,
		Env:     ChildEnv(nil, "", dir, nil, map[string]string{"KEPT": filepath.Join(l.shared, "kept.txt")}),
		Timeout: time.Minute,
		Confine: &Confinement{
			UID: uid, GID: uid,
			Binds: []Bind{{Path: dir, Write: true}, {Path: filepath.Join(l.scripts, session)}},
		},
	}
}

// probeJob reports what a job can see and do, as JSON.
const probeJob = `
import json, os, socket, sys
import decimal, fractions, csv  # not preloaded: imported as the session uid
r = {}
r['uid'] = [os.getuid(), os.geteuid(), os.getgid()]
r['groups'] = os.getgroups()
r['cwd'] = os.getcwd()
r['sessions'] = sorted(os.listdir(os.path.dirname(os.getcwd())))
status = open('/proc/self/status').read()
r['capeff'] = ''.join(l.split()[1] for l in status.splitlines() if l.split()[0] in ('CapInh:', 'CapPrm:', 'CapEff:', 'CapAmb:'))
r['nnp'] = [l.split()[1] for l in status.splitlines() if l.startswith('NoNewPrivs')][0]
r['pids'] = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
r['tmp'] = sorted(os.listdir('/tmp'))
r['kept'] = open(os.environ['KEPT']).read()
open('/tmp/mine-' + str(os.getpid()), 'w').write('x')
open('here.txt', 'w').write('written')
def attempt(f):
    try:
        f()
        return 'ok'
    except Exception as e:
        return type(e).__name__
r['write_python'] = attempt(lambda: open(sys.executable, 'ab'))
r['write_prefix'] = attempt(lambda: open(os.path.join(sys.base_prefix, 'codexec-was-here'), 'w'))
r['setuid0'] = attempt(lambda: os.setuid(0))
r['kill1'] = attempt(lambda: os.kill(1, 9))
r['shadow'] = attempt(lambda: open('/etc/shadow').read(1) or (_ for _ in ()).throw(EOFError()))
r['connect'] = attempt(lambda: socket.create_connection(('1.1.1.1', 53), timeout=2))
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); r['loopback'] = 'ok'
print(json.dumps(r))
`

type probeResult struct {
	UID         []int    `json:"uid"`
	Groups      []int    `json:"groups"`
	Cwd         string   `json:"cwd"`
	Sessions    []string `json:"sessions"`
	CapEff      string   `json:"capeff"`
	NNP         string   `json:"nnp"`
	Pids        []int    `json:"pids"`
	Tmp         []string `json:"tmp"`
	WritePython string   `json:"write_python"`
	WritePrefix string   `json:"write_prefix"`
	Setuid0     string   `json:"setuid0"`
	Kill1       string   `json:"kill1"`
	Shadow      string   `json:"shadow"`
	Connect     string   `json:"connect"`
	Loopback    string   `json:"loopback"`
	Kept        string   `json:"kept"`
}

func checkProbe(t *testing.T, out Outcome, dir string, uid int) probeResult {
	t.Helper()
	if out.ExitCode != 0 {
		t.Fatalf("probe failed: exit %d signal %q\nstdout: %s\nstderr: %s", out.ExitCode, out.Signal, out.Stdout, out.Stderr)
	}
	var r probeResult
	if err := json.Unmarshal(out.Stdout, &r); err != nil {
		t.Fatalf("probe output %q: %v (stderr %s)", out.Stdout, err, out.Stderr)
	}
	if r.UID[0] != uid || r.UID[1] != uid || r.UID[2] != uid || len(r.Groups) != 0 {
		t.Errorf("uid/euid/gid %v groups %v, want %d and none", r.UID, r.Groups, uid)
	}
	if r.Cwd != dir {
		t.Errorf("cwd %q, want %q", r.Cwd, dir)
	}
	if want := filepath.Base(dir); len(r.Sessions) != 1 || r.Sessions[0] != want {
		t.Errorf("the job sees sessions %v, want only its own %q", r.Sessions, want)
	}
	if r.CapEff != strings.Repeat("0", 64) || r.NNP != "1" {
		t.Errorf("CapEff %s NoNewPrivs %s, want no capabilities and no_new_privs", r.CapEff, r.NNP)
	}
	// A private /tmp, empty but for the way to the job's own directories
	// when those lie under /tmp, as t.TempDir's do.
	var tmp []string
	for _, name := range r.Tmp {
		if !strings.HasPrefix(dir, "/tmp/"+name+"/") {
			tmp = append(tmp, name)
		}
	}
	if len(tmp) != 0 {
		t.Errorf("/tmp holds %v at the job's start, want a private empty /tmp", tmp)
	}
	for name, got := range map[string]string{
		"write the interpreter": r.WritePython, "write the installation": r.WritePrefix,
		"setuid(0)": r.Setuid0, "kill PID 1": r.Kill1, "read /etc/shadow": r.Shadow, "connect out": r.Connect,
	} {
		if got == "ok" {
			t.Errorf("a confined job could %s", name)
		}
	}
	if r.Kept != "kept" {
		t.Errorf("a read-only mount under /tmp is lost in the job's fresh /tmp: %q", r.Kept)
	}
	if r.Loopback != "ok" {
		t.Errorf("loopback: %s", r.Loopback)
	}
	data, err := os.ReadFile(filepath.Join(dir, "here.txt"))
	if err != nil || string(data) != "written" {
		t.Errorf("the job's file in its working directory: %q, %v", data, err)
	}
	return r
}

// Both ways a job's directories reach it: mount clones the worker makes
// (a worker as root, on Linux 5.12 and later), and binds from the hidden
// roots that each spare keeps open (other workers).
func TestSandboxedZygoteConfinesEachSession(t *testing.T) {
	for _, clones := range []bool{true, false} {
		t.Run(fmt.Sprintf("clones=%v", clones), func(t *testing.T) {
			l := newSandboxLayout(t)
			l.cfg.noClones = !clones
			// Session b's directory is a mount of its own, as a session's
			// file system is: the sandbox's bind of the sessions root takes
			// it in, and no job of a must find it in its mount table.
			other := filepath.Join(l.sessions, "b")
			if err := unix.Mount("tmpfs", other, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=1m,mode=0700,uid=%d,gid=%d", testUIDB, testUIDB)); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(other, unix.MNT_DETACH) })
			z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
			if z.clones != clones {
				t.Fatalf("the zygote's jobs get mount clones: %v, want %v (this process can make them: %v)", z.clones, clones, mountClonesWork())
			}
			ra := checkProbe(t, zrun(t, z, l.spec(t, "a", testUIDA, probeJob)), filepath.Join(l.sessions, "a"), testUIDA)
			rb := checkProbe(t, zrun(t, z, l.spec(t, "b", testUIDB, probeJob)), filepath.Join(l.sessions, "b"), testUIDB)
			// A PID namespace and /proc of its own: a job sees itself, pid 2 (its
			// namespace's PID 1, root, is hidden from it).
			for _, r := range []probeResult{ra, rb} {
				if len(r.Pids) != 1 || r.Pids[0] != 2 {
					t.Errorf("a job sees pids %v, want only itself, pid 2", r.Pids)
				}
			}
			// Its scripts read-only; no other session in its mount table.
			out := zrun(t, z, l.spec(t, "a", testUIDA, `
import os
try:
    open(os.path.join(os.path.dirname(__file__), 'new.py'), 'w')
    print('scripts writable')
except OSError:
    pass
print(open('/proc/self/mountinfo').read())
`))
			if out.ExitCode != 0 || strings.Contains(string(out.Stdout), "scripts writable") {
				t.Errorf("exit %d: %s%s", out.ExitCode, out.Stdout, out.Stderr)
			}
			if strings.Contains(string(out.Stdout), other) {
				t.Errorf("a job's mount table names another session's directory %s:\n%s", other, out.Stdout)
			}

			// An unconfined job is never run by a sandboxed zygote.
			s := l.spec(t, "a", testUIDA, "print(1)")
			s.Confine = nil
			if _, err := z.Run(context.Background(), s); err == nil {
				t.Fatal("a sandboxed zygote ran a job without confinement")
			}
		})
	}
}

func TestSandboxedZygoteKillsEscapedProcesses(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}, Sandbox: l.cfg})
	// A daemon that leaves the job's session and process group and keeps
	// writing: after the job, the file must stop growing.
	out := zrun(t, z, l.spec(t, "a", testUIDA, `
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            with open('beat', 'a') as f:
                f.write('.')
            time.sleep(0.01)
    os._exit(0)
time.sleep(0.2)
print('left a daemon')
`))
	if out.ExitCode != 0 {
		t.Fatalf("job failed: %s", out.Stderr)
	}
	beat := filepath.Join(l.sessions, "a", "beat")
	size := func() int64 {
		fi, err := os.Stat(beat)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	time.Sleep(100 * time.Millisecond)
	before := size()
	time.Sleep(300 * time.Millisecond)
	if after := size(); after != before {
		t.Fatalf("the daemon outlived its job: %d -> %d bytes", before, after)
	}
}

func TestRunSandboxed(t *testing.T) {
	l := newSandboxLayout(t)
	out, err := RunSandboxed(context.Background(), l.cfg, l.spec(t, "b", testUIDB, probeJob))
	if err != nil {
		t.Fatal(err)
	}
	checkProbe(t, out, filepath.Join(l.sessions, "b"), testUIDB)

	out, err = RunSandboxed(context.Background(), l.cfg, l.spec(t, "a", testUIDA, "import sys\nprint('to err', file=sys.stderr)\nraise SystemExit(3)"))
	if err != nil {
		t.Fatal(err)
	}
	if out.ExitCode != 3 || !strings.Contains(string(out.Stderr), "to err") {
		t.Fatalf("exit %d stderr %q", out.ExitCode, out.Stderr)
	}
}

// Fresh runs each job in a sandboxed interpreter of its own, started
// ahead of time: the next job runs in the one started after the previous
// job, and no job sees another's interpreter (what it put in sys.modules).
func TestFreshStartsTheNextInterpreterAhead(t *testing.T) {
	l := newSandboxLayout(t)
	f := NewFresh(l.cfg, nil)
	defer f.Stop(context.Background())
	const job = "import sys\nprint('polluted' in sys.modules)\nsys.modules['polluted'] = sys"
	waiting := func() *freshEntry {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.ready) != 1 {
			t.Fatalf("%d interpreters wait for the next job, want 1", len(f.ready))
		}
		for _, e := range f.ready {
			return e
		}
		return nil
	}
	var prev *freshEntry
	for i := range 3 {
		out, err := f.Run(context.Background(), l.spec(t, "a", testUIDA, job))
		if err != nil || out.ExitCode != 0 {
			t.Fatalf("job %d: %v %s", i, err, out.Stderr)
		}
		if string(out.Stdout) != "False\n" {
			t.Fatalf("job %d saw another job's interpreter: %q", i, out.Stdout)
		}
		if prev != nil && (prev.z == nil || prev.z.Jobs() != 1) {
			t.Fatalf("job %d did not run in the interpreter started ahead for it", i)
		}
		prev = waiting()
		<-prev.done // started before the next job comes
		if prev.err != nil {
			t.Fatalf("the next interpreter: %v", prev.err)
		}
	}
}

// A sandboxed job's process (pid 2 of a namespace of its own) ends the way
// `python job.py` would, signals included: its namespace's init passes the
// wait status on.
func TestSandboxedZygoteOutcomes(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
	for _, tt := range outcomeCases {
		t.Run(tt.name, func(t *testing.T) {
			s := l.spec(t, "a", testUIDA, tt.src)
			out := zrun(t, z, s)
			checkOutcome(t, out, tt.exitCode, tt.signal, tt.stdout, tt.stderrHas)
		})
	}
}

// What a sandboxed job costs end to end, in a zygote with the default
// preloads: print(1), and a job that still holds 256 MiB when it exits (so
// that its address space's teardown is large).
func BenchmarkSandboxedZygote(b *testing.B) {
	l := newSandboxLayout(b)
	z := startZygote(b, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: DefaultPreload, Sandbox: l.cfg})
	benchJobEnd(b, z, func(b testing.TB, src string) Spec { return l.spec(b, "a", testUIDA, src) })
}
