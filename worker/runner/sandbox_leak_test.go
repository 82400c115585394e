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

// sharedMapWriteJob writes the marker MARK (built at run time, so that the
// script's text does not hold it whole) at the end of every shared map of
// its process that it can make writable, and prints their names.
const sharedMapWriteJob = `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
mark = ('sess' + '-' + os.environ['MARK']).encode()
wrote = []
for l in open('/proc/self/maps').read().splitlines():
    r = l.split()
    if r[1][3] != 's':
        continue
    lo, hi = (int(x, 16) for x in r[0].split('-'))
    if libc.mprotect(lo, hi - lo, 7) == 0:
        ctypes.memmove(hi - 64, mark, len(mark))
        wrote.append(l)
print(wrote)
`

// Every job of a zygote is its fork, so a map the zygote made shared
// (MAP_SHARED: Python's mmap.mmap(-1, n) by default) is one memory for
// the zygote and every job of every session. The keeper's code and stack
// were such maps: a job made the code page writable and replaced it, and
// the next job of another session ran that code at its exit, as that
// session, reading its files into the shared stack for the first job to
// read. Nothing a job inherits from the zygote may be shared.
func TestSandboxedJobsShareNoMemory(t *testing.T) {
	l := newSandboxLayout(t)
	z := startZygote(t, ZygoteConfig{Python: l.python, Env: ChildEnv(nil, "", "", nil, nil), Sandbox: l.cfg})
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	mark := hex.EncodeToString(b)
	a := l.spec(t, "a", testUIDA, sharedMapWriteJob)
	a.Env = append(a.Env, "MARK="+mark)
	out := zrun(t, z, a)
	if out.ExitCode != 0 {
		t.Fatalf("session a: exit %d\n%s%s", out.ExitCode, out.Stdout, out.Stderr)
	}
	if s := strings.TrimSpace(string(out.Stdout)); s != "[]" {
		t.Errorf("a job made these maps, shared with the zygote and other sessions' jobs, writable: %s", s)
	}
	for i := range 2 {
		out := zrun(t, z, l.spec(t, "b", testUIDB, memoryScanJob))
		var found []string
		if err := json.Unmarshal(out.Stdout, &found); err != nil || out.ExitCode != 0 {
			t.Fatalf("scan %d: exit %d, %v\n%s%s", i, out.ExitCode, err, out.Stdout, out.Stderr)
		}
		if slices.Contains(found, "sess-"+mark) {
			t.Errorf("a job of session b found what a job of session a wrote in its own memory (scan %d)", i)
		}
	}
}
