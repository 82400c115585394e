//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel objects that are not files, processes or sockets are shared by
// every process that can name them unless the spare gives each job its own:
// the pseudo-terminals of a devpts instance, and the session keyring.

// holdJob runs src (a job of session) in the background; src writes the
// file "ready" in its working directory once it holds what it holds, then
// waits for the file "done". The returned function waits for the file
// "ready" (failing the test if the job ended first); release lets the job
// end and returns its outcome.
func holdJob(t *testing.T, z *Zygote, l *sandboxLayout, session string, uid int, src string) (ready func(), release func() Outcome) {
	t.Helper()
	dir := filepath.Join(l.sessions, session)
	s := l.spec(t, session, uid, src)
	type result struct {
		out Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := z.Run(context.Background(), s)
		done <- result{out, err}
	}()
	var res *result
	wait := func() Outcome {
		if res == nil {
			r := <-done
			res = &r
		}
		if res.err != nil {
			t.Fatalf("the holding job: %v", res.err)
		}
		return res.out
	}
	ready = func() {
		t.Helper()
		for {
			if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
				return
			}
			select {
			case r := <-done:
				res = &r
				t.Fatalf("the holding job ended before it was ready: %v exit %d\nstdout: %s\nstderr: %s", r.err, r.out.ExitCode, r.out.Stdout, r.out.Stderr)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	release = func() Outcome {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "done"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return wait()
	}
	t.Cleanup(func() {
		if res == nil {
			_ = os.WriteFile(filepath.Join(dir, "done"), nil, 0o644)
			<-done
		}
	})
	return ready, release
}

// waitForDone is the tail of a holding job's script.
const waitForDone = `
open('ready', 'w').close()
import time
while not os.path.exists('done'):
    time.sleep(0.01)
`

// Each job has a devpts instance of its own, with a bound on its
// terminals: a job sees no other job's terminal, and one that opens
// terminals until it is refused takes none from the others (with one
// instance per zygote it saw them all, and could take every pty of the
// host).
func TestSandboxedJobsHaveTheirOwnPtys(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}, Sandbox: l.cfg})
	ready, release := holdJob(t, z, l, "a", testUIDA, `
import os
m, s = os.openpty()
print(os.ttyname(s))
`+waitForDone+`
# Still able to open one after the other session's job took all of its own.
m2, s2 = os.openpty()
print(os.ttyname(s2))
`)
	ready()
	out := zrun(t, z, l.spec(t, "b", testUIDB, `
import errno, json, os
r = {'pts': sorted(os.listdir('/dev/pts'))}
held = []
try:
    while len(held) < 500:
        held.append(os.openpty())
    r['error'] = 'none'
except OSError as e:
    r['error'] = errno.errorcode.get(e.errno, str(e.errno))
r['opened'] = len(held)
print(json.dumps(r))
`))
	if out.ExitCode != 0 {
		t.Fatalf("job b: exit %d\nstdout: %s\nstderr: %s", out.ExitCode, out.Stdout, out.Stderr)
	}
	var r struct {
		Pts    []string `json:"pts"`
		Error  string   `json:"error"`
		Opened int      `json:"opened"`
	}
	if err := json.Unmarshal(out.Stdout, &r); err != nil {
		t.Fatalf("job b said %q: %v", out.Stdout, err)
	}
	if !slices.Equal(r.Pts, []string{"ptmx"}) {
		t.Errorf("a job sees /dev/pts %v while another session's job holds a terminal, want only ptmx", r.Pts)
	}
	// The devpts instance's own bound (max=), not the descriptor limit
	// (EMFILE) or the host's (kernel.pty.max).
	if r.Error != "ENOSPC" || r.Opened == 0 || r.Opened > 64 {
		t.Errorf("a job opened %d terminals and then got %s, want its instance's bound (ENOSPC) after a few", r.Opened, r.Error)
	}
	a := release()
	if a.ExitCode != 0 {
		t.Fatalf("job a: exit %d\nstdout: %s\nstderr: %s", a.ExitCode, a.Stdout, a.Stderr)
	}
	if got := strings.Fields(string(a.Stdout)); len(got) != 2 || got[0] != "/dev/pts/0" || got[1] != "/dev/pts/1" {
		t.Errorf("job a's terminals %q, want /dev/pts/0 and /dev/pts/1 of its own instance", got)
	}
}

// keyctlJob is the prologue of a job that uses the kernel's keyrings:
// add_key and keyctl through syscall(2), libc having no wrapper.
const keyctlJob = `
import ctypes, errno, json, os
nrs = {'x86_64': (248, 250), 'aarch64': (217, 219)}[os.uname().machine]
libc = ctypes.CDLL(None, use_errno=True)
def add_key(kind, desc, payload, ring):
    n = libc.syscall(ctypes.c_long(nrs[0]), kind, desc, payload, ctypes.c_size_t(len(payload)), ctypes.c_long(ring))
    return n if n >= 0 else -ctypes.get_errno()
def keyctl(*args):
    n = libc.syscall(ctypes.c_long(nrs[1]), *[a if isinstance(a, bytes) else ctypes.c_long(a) for a in args])
    return n if n >= 0 else -ctypes.get_errno()
SESSION, GET_KEYRING_ID, SEARCH = -3, 0, 10
def proc_keys():
    try:
        return open('/proc/keys').read()
    except OSError:
        return ''
`

// startZygoteInSessionKeyring starts a zygote that inherits a session
// keyring of the worker's, as a worker started by systemd (KeyringMode=
// private, its default for services) or in a login session (pam_keyinit)
// has one: a keyring that every process of the worker possesses, root's or
// not. (A test run from a shell may have none, or root's user session
// keyring, into which the kernel never adds another uid's key.) The
// keyring is joined by one locked thread that starts the zygote. The thread
// is unlocked afterwards, never ended: a goroutine that returns locked ends
// its thread, and every child that thread ever started, for any goroutine
// before this one locked it (the tests' shared zygote among them), would
// get its parent-death signal.
func startZygoteInSessionKeyring(t *testing.T, cfg ZygoteConfig) *Zygote {
	t.Helper()
	type started struct {
		z   *Zygote
		err error
	}
	ch := make(chan started)
	stop := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if _, _, e := unix.Syscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0); e != 0 {
			ch <- started{err: fmt.Errorf("keyctl(KEYCTL_JOIN_SESSION_KEYRING): %w", e)}
			return
		}
		z, err := StartZygote(context.Background(), cfg)
		ch <- started{z, err}
		if err == nil {
			<-stop
		}
	}()
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	t.Cleanup(func() {
		s.z.Close()
		close(stop)
	})
	return s.z
}

// Each job has a session keyring of its own: a key that one session's job
// adds to its session keyring is not in another's (it was, in the keyring
// every child inherited from the zygote, which possession let any job
// read).
func TestSandboxedJobsHaveTheirOwnSessionKeyring(t *testing.T) {
	if m := map[string]bool{"amd64": true, "arm64": true}; !m[runtime.GOARCH] {
		t.Skipf("the test's jobs know keyctl's number on amd64 and arm64 only, not %s", runtime.GOARCH)
	}
	l := newSandboxLayout(t)
	z := startZygoteInSessionKeyring(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{}, Sandbox: l.cfg})
	ready, release := holdJob(t, z, l, "a", testUIDA, keyctlJob+`
r = {'added': add_key(b'user', b'codexec-secret-of-a', b'secret of a', SESSION)}
r['ring'] = keyctl(GET_KEYRING_ID, SESSION, 0)
print(json.dumps(r))
`+waitForDone)
	ready()
	out := zrun(t, z, l.spec(t, "b", testUIDB, keyctlJob+`
r = {'ring': keyctl(GET_KEYRING_ID, SESSION, 0)}
r['found'] = keyctl(SEARCH, SESSION, b'user', b'codexec-secret-of-a', 0)
r['listed'] = 'codexec-secret-of-a' in proc_keys()
print(json.dumps(r))
`))
	a := release()
	type keys struct {
		Added  int  `json:"added"`
		Ring   int  `json:"ring"`
		Found  int  `json:"found"`
		Listed bool `json:"listed"`
	}
	var ra, rb keys
	for _, j := range []struct {
		out Outcome
		r   *keys
	}{{a, &ra}, {out, &rb}} {
		if j.out.ExitCode != 0 {
			t.Fatalf("job: exit %d\nstdout: %s\nstderr: %s", j.out.ExitCode, j.out.Stdout, j.out.Stderr)
		}
		if err := json.Unmarshal(j.out.Stdout, j.r); err != nil {
			t.Fatalf("job said %q: %v", j.out.Stdout, err)
		}
	}
	const eperm, enosys = -1, -38
	if ra.Added == eperm || ra.Added == enosys {
		// A system-call filter refuses the keyrings to jobs altogether.
		t.Logf("add_key refused to jobs (%d): nothing to share", ra.Added)
		return
	}
	if ra.Added <= 0 {
		t.Fatalf("add_key in job a: %d", ra.Added)
	}
	if rb.Found > 0 || rb.Listed {
		t.Errorf("a key of session a's job is in session b's job's reach: search %d, in /proc/keys %v", rb.Found, rb.Listed)
	}
	if ra.Ring <= 0 || rb.Ring <= 0 || ra.Ring == rb.Ring {
		t.Errorf("session keyrings %d and %d, want one of its own for each job", ra.Ring, rb.Ring)
	}
}
