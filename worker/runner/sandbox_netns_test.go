//go:build linux

package runner

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// netnsJob reports the job's network namespace and its interfaces.
const netnsJob = `
import json, os, socket
print(json.dumps({'ns': os.readlink('/proc/self/ns/net'), 'ifaces': sorted(n for _, n in socket.if_nameindex())}))
`

// Without egress, the jobs of one session share a network namespace (a
// loopback only), made for the session's first job and joined by the next;
// another session's jobs, and a job that names no session, get others.
func TestSandboxedZygoteSharesANetworkNamespacePerSession(t *testing.T) {
	l := newSandboxLayout(t)
	if l.cfg.Box.Network() {
		t.Skip("this sandbox gives jobs the host's network")
	}
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
	run := func(session string, uid int, key string) string {
		t.Helper()
		s := l.spec(t, session, uid, netnsJob)
		s.Confine.Session = key
		out := zrun(t, z, s)
		var r struct {
			NS     string   `json:"ns"`
			Ifaces []string `json:"ifaces"`
		}
		if err := json.Unmarshal(out.Stdout, &r); err != nil || out.ExitCode != 0 {
			t.Fatalf("session %q: exit %d, %v\n%s%s", key, out.ExitCode, err, out.Stdout, out.Stderr)
		}
		if !slices.Equal(r.Ifaces, []string{"lo"}) {
			t.Errorf("session %q: interfaces %v, want a loopback only", key, r.Ifaces)
		}
		return r.NS
	}
	a1 := run("a", testUIDA, "session-a")
	b := run("b", testUIDB, "session-b")
	a2 := run("a", testUIDA, "session-a")
	none := run("a", testUIDA, "")
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Errorf("two jobs of one session got network namespaces %s and %s, want one", a1, a2)
	}
	for _, other := range []struct{ name, ns string }{{"another session's job", b}, {"a job of no session", none}, {"the worker", host}} {
		if other.ns == a1 {
			t.Errorf("%s shares session a's network namespace %s", other.name, a1)
		}
	}
	if b == none || b == host || none == host {
		t.Errorf("network namespaces shared: session b %s, no session %s, the worker %s", b, none, host)
	}
}

// netnsHeld counts the network namespaces the process pid holds open.
func netnsHeld(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(target, "net:[") {
			n++
		}
	}
	return n
}

// Each session's network namespace costs the kernel about 150 KiB, charged
// to no job's cgroup, and stays open a minute after the session's last job;
// every HTTP session is a session, so a client that ran a call in each of
// thousands of new sessions kept thousands open on each zygote. The zygote
// keeps at most _NETNS_MAX, closing the one idle the longest, and a
// session's next job after that gets a new one.
func TestSandboxedZygoteKeepsBoundedNetworkNamespaces(t *testing.T) {
	l := newSandboxLayout(t)
	if l.cfg.Box.Network() {
		t.Skip("this sandbox gives jobs the host's network")
	}
	const most = 128 // zygote.py's _NETNS_MAX
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Sandbox: l.cfg})
	for i := range most + 12 {
		s := l.spec(t, "a", testUIDA, "pass\n")
		s.Confine.Session = fmt.Sprintf("session-%d", i)
		if out := zrun(t, z, s); out.ExitCode != 0 {
			t.Fatalf("session %d: exit %d\n%s", i, out.ExitCode, out.Stderr)
		}
	}
	// Its own, to return to, and the sessions'.
	if n := netnsHeld(t, z.Info().PID); n > most+1 {
		t.Errorf("the zygote holds %d network namespaces open, more than %d sessions' and its own", n, most)
	}
}
