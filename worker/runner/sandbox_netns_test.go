//go:build linux

package runner

import (
	"encoding/json"
	"os"
	"slices"
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
