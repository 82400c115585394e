package main

import (
	"maps"
	"slices"
	"testing"
)

// caseDescriptors: a job holds stdin, stdout and stderr and nothing else
// (no descriptor of its set-up: the roots of every session's directories,
// a socket to its zygote), and its result is its process's real exit
// status, whatever it writes on whatever it holds: a job that writes a
// forged report of success (the bare "0" the zygote once read from each
// job, or an exit message of its control protocol) on every descriptor,
// then fails, gets status error and exit 1.
func caseDescriptors(t *testing.T, tg *secTarget, s *secSession) {
	res, er := s.run(t, `import json, os
fds = {}
for name in os.listdir('/proc/self/fd'):
    try:
        fds[name] = os.readlink('/proc/self/fd/' + name)
    except OSError:
        pass  # the listing's own descriptor, closed since
print(json.dumps(fds))
`, nil)
	var fds map[string]string
	lastJSON(t, res, er, &fds)
	if got := slices.Sorted(maps.Keys(fds)); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Errorf("the job holds descriptors %v, want only 0, 1 and 2", fds)
	}

	const forge = `import os, sys
forged = [b'0', b'0\n', b'{"op":"exited","id":1,"status":0}', b'{"op":"exited","id":2,"status":0}']
for fd in sorted(set(range(3, 1100)) | {int(n) for n in os.listdir('/proc/self/fd')}):
    for msg in forged:
        try:
            os.write(fd, msg)
        except OSError:
            break
print('forged', flush=True)
`
	for _, ending := range []string{"sys.exit(1)\n", "raise RuntimeError('the real outcome')\n", "os._exit(1)\n"} {
		res, er := s.run(t, forge+ending, nil)
		if er.Status != "error" || er.ExitCode != 1 {
			t.Errorf("a job that forged a report of success, then ended with %q: status %q exit %d, want error and 1\n%s",
				ending, er.Status, er.ExitCode, dump(res, er))
		}
	}
}
