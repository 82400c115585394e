package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/cmd/codexec/internal/e2e"
)

// nobody is the unprivileged user the rootless test runs codexec as.
const nobody = 65534

// A person who runs `codexec dev` as themselves, not root, still gets the
// sandbox: jobs in user namespaces of their own that see a read-only
// system, their environment and their session's directory, and nothing
// else of the machine (here: a file the user may read on the host), with no
// network and nothing left behind. Jobs keep the user's uid.
func TestRootlessDevSandbox(t *testing.T) {
	if testing.Short() {
		t.Skip("starts codexec dev as another user")
	}
	if os.Geteuid() != 0 {
		t.Skip("starting codexec as an unprivileged user needs root")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		requireOrSkip(t, "setpriv (util-linux)", err)
	}
	// What the launcher needs (user namespaces for unprivileged users):
	// bubblewrap's when the suite runs with it, the kernel's otherwise.
	userns := []string{"unshare", "--user", "--pid", "--fork", "--mount", "/bin/true"}
	if os.Getenv("CODEXEC_SANDBOX_LAUNCHER") == "bwrap" {
		userns = []string{"bwrap", "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "/bin/true"}
	}
	probe := exec.Command(setpriv, append([]string{"--reuid", fmt.Sprint(nobody), "--regid", fmt.Sprint(nobody), "--clear-groups", "--"}, userns...)...)
	if out, err := probe.CombinedOutput(); err != nil {
		requireOrSkip(t, "user namespaces for unprivileged users", fmt.Errorf("%s: %v: %s", userns[0], err, out))
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		requireOrSkip(t, "/usr/bin/python3 (an interpreter an unprivileged user can run)", err)
	}

	// Everything nobody needs, in a directory nobody may enter: the test
	// binary, acting as codexec, and the data directory.
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "codexec")
	copyFile(t, os.Args[0], exe, 0o755)
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	// A file the user may read on the host, outside anything a job sees.
	secret := "rootless-secret-" + fmt.Sprint(time.Now().UnixNano())
	secretPath := filepath.Join(dir, "secret.txt")
	if err := os.WriteFile(secretPath, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	// A service on the host's loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(conn, secret)
			conn.Close()
		}
	}()

	env := []string{"CODEXEC_E2E_MAIN=1", "PATH=/usr/bin:/bin", "HOME=" + data, "CODEXEC_DATA_DIR=" + data}
	args := []string{"--reuid", fmt.Sprint(nobody), "--regid", fmt.Sprint(nobody), "--clear-groups", "--",
		exe, "dev", "--sandbox", "require", "--python", "/usr/bin/python3", "--managers", "venv"}
	// Over this process's environment, as mcp-go's stdio client starts a
	// server by default.
	c, p := stdio(t, e2e.Command{Name: "codexec dev (as nobody)", Path: setpriv, Args: args, Env: append(os.Environ(), env...)}, nil)
	stderr := p.Out

	probeCode := fmt.Sprintf(`
import json, os, socket, sys
r = {'uid': os.getuid()}
status = open('/proc/self/status').read()
r['caps'] = ''.join(l.split()[1] for l in status.splitlines() if l.split()[0] in ('CapInh:', 'CapPrm:', 'CapEff:', 'CapAmb:'))
r['nnp'] = [l.split()[1] for l in status.splitlines() if l.startswith('NoNewPrivs')][0]
def attempt(f):
    try:
        return 'ok: %%r' %% (f(),)
    except Exception as e:
        return type(e).__name__
r['secret'] = attempt(lambda: open(%q).read())
r['loopback'] = attempt(lambda: socket.create_connection(('127.0.0.1', %d), timeout=3).recv(100))
r['write_python'] = attempt(lambda: open(sys.executable, 'ab'))
# The sandbox's /dev is the user's (a tmpfs it made) and every job's: a job
# that planted a file there (or a link over /dev/null) would reach the others.
r['write_dev'] = attempt(lambda: open('/dev/codexec-planted', 'w'))
r['home'] = sorted(os.listdir('/')) 
open('/tmp/rootless-was-here', 'w').write('x')
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time
        while True:
            with open('beat', 'a') as f:
                f.write('.')
            time.sleep(0.01)
    os._exit(0)
import time
time.sleep(0.3)
print(json.dumps(r))
`, secretPath, ln.Addr().(*net.TCPAddr).Port)
	res, er := call(t, c, "execute_code", map[string]any{"code": probeCode})
	if res.IsError {
		t.Fatalf("probe: %+v", er)
	}
	var r struct {
		UID                           int
		Caps, NNP                     string
		Secret, Loopback, WritePython string
		Home                          []string
	}
	var raw map[string]any
	if err := json.Unmarshal([]byte(er.Stdout), &raw); err != nil {
		t.Fatalf("probe output %q: %v", er.Stdout, err)
	}
	b, _ := json.Marshal(raw)
	_ = json.Unmarshal(b, &r)
	r.WritePython, _ = raw["write_python"].(string)
	writeDev, _ := raw["write_dev"].(string)
	if r.UID != nobody {
		t.Errorf("the job runs as uid %d, want the worker's (%d)", r.UID, nobody)
	}
	if r.Caps != strings.Repeat("0", 64) || r.NNP != "1" {
		t.Errorf("capabilities %s, no_new_privs %s: want none, and no_new_privs", r.Caps, r.NNP)
	}
	for what, got := range map[string]string{"read a host file the user may read": r.Secret, "reach the host's loopback": r.Loopback, "write the interpreter": r.WritePython, "write /dev": writeDev} {
		if strings.HasPrefix(got, "ok") || strings.Contains(got, secret) {
			t.Errorf("a rootless job could %s: %s", what, got)
		}
	}
	if strings.Contains(er.Stdout+er.Stderr, secret) {
		t.Errorf("the secret reached the job's output")
	}
	if _, err := os.Stat("/tmp/rootless-was-here"); err == nil {
		os.Remove("/tmp/rootless-was-here")
		t.Errorf("the job's /tmp is the host's")
	}
	// The daemon it left went with it.
	beat := ""
	_ = filepathWalk(data, func(p string) {
		if filepath.Base(p) == "beat" {
			beat = p
		}
	})
	if beat == "" {
		t.Fatal("the job's daemon never wrote")
	}
	time.Sleep(200 * time.Millisecond)
	fi1, _ := os.Stat(beat)
	time.Sleep(500 * time.Millisecond)
	fi2, _ := os.Stat(beat)
	if fi1 == nil || fi2 == nil || fi1.Size() != fi2.Size() {
		t.Errorf("the job's daemon outlived it")
	}
	// Without cgroups a fork bomb meets RLIMIT_NPROC, set to what the
	// user runs plus the job's limit: the job fails, the worker goes on.
	res, er = call(t, c, "execute_code", map[string]any{
		"code": "import os\nwhile True:\n    os.fork()", "limits": map[string]any{"processes": 20}, "timeout_seconds": 60,
	})
	if !res.IsError || er.Limit != "processes" {
		t.Errorf("fork bomb as a user: isError=%v limit %q status %q: %s", res.IsError, er.Limit, er.Status, er.Message)
	}
	if res, er := call(t, c, "execute_code", map[string]any{"code": "print('still here')"}); res.IsError || er.Stdout != "still here\n" {
		t.Errorf("after the fork bomb: %+v", er)
	}
	// Without root a job shares its uid with the init of its PID namespace,
	// which reports the job's status: the job can neither kill that init
	// with a signal it would handle nor take its descriptors (it is not
	// dumpable), so a job that tries both, forging success on whatever it
	// gets, and fails is reported as failed.
	res, er = call(t, c, "execute_code", map[string]any{"code": `import ctypes, os, signal, sys, time
for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE):
    try:
        os.kill(1, sig)
    except OSError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(1), ctypes.c_long(0))  # pidfd_open
taken = 0
for fd in range(1100 if pidfd >= 0 else 0):
    got = libc.syscall(ctypes.c_long(438), ctypes.c_long(pidfd), ctypes.c_long(fd), ctypes.c_long(0))  # pidfd_getfd
    if got >= 0:
        taken += 1
        for msg in (b'0', b'{"op":"exited","id":1,"status":0}'):
            try:
                os.write(got, msg)
            except OSError:
                pass
print('took', taken, 'descriptors of pid 1', flush=True)
time.sleep(0.2)
sys.exit(1)
`})
	if er.Status != "error" || er.ExitCode != 1 || !strings.Contains(er.Stdout, "took 0 ") {
		t.Errorf("a job that went for its namespace's init, then failed: status %q exit %d: %q %q", er.Status, er.ExitCode, er.Stdout, er.Stderr)
	}
	if !strings.Contains(stderr.String(), "sandbox without root") {
		t.Errorf("codexec dev as a user did not say what its sandbox lacks")
	}
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func filepathWalk(root string, fn func(string)) error {
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			fn(p)
		}
		return nil
	})
}
