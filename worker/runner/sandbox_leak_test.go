//go:build linux

package runner

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// memoryScanJob prints every marker (sess-, env- or dir- and 16 hex
// digits) found in its own process's memory, which is a copy of the
// zygote's: a job of one session must find none of another's.
const memoryScanJob = `
import ctypes, json, re
pat = re.compile(rb'(?:sess|env|dir)-[0-9a-f]{16}')
found = set()
with open('/proc/self/maps') as maps:
    regions = [l.split() for l in maps]
try:
    mem = open('/proc/self/mem', 'rb', 0)
except OSError:
    mem = None
for r in regions:
    lo, hi = (int(x, 16) for x in r[0].split('-'))
    if 'r' not in r[1] or (len(r) > 5 and r[5] in ('[vvar]', '[vvar_vclock]', '[vsyscall]')):
        continue
    try:
        if mem is not None:
            mem.seek(lo)
            data = mem.read(hi - lo)
        else:
            data = ctypes.string_at(lo, hi - lo)
    except (OSError, ValueError, OverflowError):
        continue
    found.update(m.decode() for m in pat.findall(data))
print(json.dumps(sorted(found)))
`

// A job's process is a fork of the zygote, so whatever the zygote decoded
// of another session's request (its session's name, its environment,
// directories and uid), and whatever a spare rehearsed with, could be read
// in that job's own memory. The zygote decodes a request's header only,
// names sessions by an opaque token, wipes each request once handed on,
// and spares rehearse with a request of no session.
func TestSandboxedJobsFindNoOtherSessionInMemory(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Preload: []string{"json", "re"}, Sandbox: l.cfg})
	marker := func(kind string) string {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return kind + "-" + hex.EncodeToString(b)
	}
	spec := func(session string, uid int, src, key, env string) Spec {
		s := l.spec(t, session, uid, src)
		s.Confine.Session = key
		s.Env = append(s.Env, "MARK="+env)
		return s
	}
	// Longer than b's: freed, a's strings would not be in the allocator's
	// blocks that b's own request reuses.
	pad := "-" + strings.Repeat("x", 100)
	aKey, aEnv, aDir := marker("sess"), marker("env"), marker("dir")
	aKeyLong, aEnvLong := aKey+pad, aEnv+pad
	a := spec("a", testUIDA, "print(1)", aKeyLong, aEnvLong)
	// The script in a directory of a's that names the marker.
	dir := filepath.Join(filepath.Dir(a.Script), aDir+pad)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a.Script = filepath.Join(dir, "job.py")
	if err := os.WriteFile(a.Script, []byte("print(1)"), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if out := zrun(t, z, a); out.ExitCode != 0 {
			t.Fatalf("session a: exit %d\n%s%s", out.ExitCode, out.Stdout, out.Stderr)
		}
	}
	// The spares ready now were forked after a's requests; so are the
	// ones forked for b's later jobs.
	for i := range 4 {
		bKey, bEnv := marker("sess"), marker("env")
		out := zrun(t, z, spec("b", testUIDB, memoryScanJob, bKey, bEnv))
		var found []string
		if err := json.Unmarshal(out.Stdout, &found); err != nil || out.ExitCode != 0 {
			t.Fatalf("scan %d: exit %d, %v\n%s%s", i, out.ExitCode, err, out.Stdout, out.Stderr)
		}
		// The scan must see what is in its memory: its own environment.
		if !slices.Contains(found, bEnv) {
			t.Fatalf("scan %d found %v, not even its own environment's %s: it cannot see the memory it scans", i, found, bEnv)
		}
		for _, m := range []string{aKey, aEnv, aDir} {
			if slices.Contains(found, m) {
				t.Errorf("a job of session b found session a's %s in its memory (scan %d: %v)", m, i, found)
			}
		}
	}
}
