//go:build linux

package runner

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// objectScanJob lists the objects of its own interpreter whose bytes hold
// each of two strings: the first is another session's, the second the
// job's own, kept in a bytearray, so that a scan that finds nothing fails
// the test. It walks everything reachable from every object the collector
// tracks (the zygote's frozen ones included), its frames and sys.modules:
// the zygote's globals and its _Zygote, dictionary keys, buffers. Each
// string is written reversed in the source and built with
// bytes(reversed(...)), so that no code object holds it, and the patterns
// themselves are left out.
const objectScanJob = `
import gc, json, sys
pats = [bytes(reversed(b'%s')), bytes(reversed(b'%s'))]
keep = bytearray(pats[1])
hits = [[], []]
gc.unfreeze()  # the zygote froze its objects, out of get_objects' sight
todo = gc.get_objects() + [sys._getframe(), sys.modules]
seen = set(map(id, pats)) | {id(todo)}
alive = []
while todo:
    o = todo.pop()
    if id(o) in seen:
        continue
    seen.add(id(o))
    alive.append(o)
    if isinstance(o, (str, bytes, bytearray)):
        b = o.encode('utf-8', 'surrogatepass') if isinstance(o, str) else o
        for k, p in enumerate(pats):
            if p in b:
                hits[k].append(type(o).__name__ + ' ' + repr(bytes(b[:100])))
    else:
        todo.extend(gc.get_referents(o))
        if isinstance(o, dict):
            todo.extend(o)  # the collector does not visit str keys
        if type(o).__name__ == 'frame':
            todo.extend([o.f_back, o.f_locals])
print(json.dumps({'other': hits[0], 'own': hits[1]}))
`

// A job's process is a fork of the zygote, with a copy of its objects: what
// the zygote knew of other sessions' jobs when it forked was in objects the
// job could reach (gc.get_objects(), the zygote's frames and globals): the
// last run request (another session's scope, directories, uid and job id),
// the sessions whose network namespaces were open and the request buffer,
// until 2026-12-03. Now the job's process drops them before it takes its
// job.
func TestSandboxedJobHoldsNoObjectOfAnotherSession(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json"}, Sandbox: l.cfg})
	const victim = "s-5ec7e75ec7e75ec7e75ec7e75ec7e7a1" // session b's scope
	const own = "own-marker-0c0ffee0c0ffee"
	for range 2 {
		s := l.spec(t, "b", testUIDB, "print('b')")
		s.Confine.Session = victim
		s.Env = append(s.Env, "VICTIM_TOKEN="+victim)
		if out := zrun(t, z, s); out.ExitCode != 0 {
			t.Fatalf("session b: exit %d\n%s", out.ExitCode, out.Stderr)
		}
	}
	src := fmt.Sprintf(objectScanJob, reverse(victim), reverse(own))
	for i := range 3 {
		s := l.spec(t, "a", testUIDA, src)
		s.Confine.Session = "s-aaaa"
		out := zrun(t, z, s)
		var r struct{ Other, Own []string }
		if err := json.Unmarshal(out.Stdout, &r); err != nil || out.ExitCode != 0 {
			t.Fatalf("session a, job %d: exit %d, %v\n%s%s", i, out.ExitCode, err, out.Stdout, out.Stderr)
		}
		if len(r.Own) == 0 {
			t.Fatalf("session a, job %d: the scan found not even the job's own bytes", i)
		}
		if len(r.Other) > 0 {
			t.Errorf("session a, job %d: session b's scope is in %d objects of the job's interpreter: %q", i, len(r.Other), r.Other)
		}
	}
}

func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}
