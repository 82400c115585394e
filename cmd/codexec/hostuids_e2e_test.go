package main

import (
	"strconv"
	"strings"
	"testing"
)

// Two workers on one host, each with a data directory of its own (here two
// `codexec dev`, whose stdio sessions are both "local"), give their
// sessions two uids: one register of uids per host (--uid-dir, one for the
// whole test binary here). Each worker once counted uids in its own data
// directory, so both sessions ran as 2000000000 and shared RLIMIT_NPROC,
// the uid's keyrings and whatever else the kernel keeps per uid.
func TestSecurityTwoWorkersOneHostTwoUIDs(t *testing.T) {
	requireSandbox(t)
	if securityBaseline {
		t.Skip("the baseline has no uids of sessions")
	}
	uid := func(dataDir string) int {
		c, _ := devStdio(t, dataDir, "CODEXEC_SANDBOX=require")
		res, er := call(t, c, "execute_code", map[string]any{"code": "import os\nprint(os.getuid())"})
		if res.IsError {
			t.Fatalf("execute_code: %+v", er)
		}
		n, err := strconv.Atoi(strings.TrimSpace(er.Stdout))
		if err != nil {
			t.Fatalf("uid %q: %v", er.Stdout, err)
		}
		return n
	}
	a, b := uid(t.TempDir()), uid(t.TempDir())
	if a == b || a < sandboxUIDBase || b < sandboxUIDBase {
		t.Fatalf("the sessions of two workers on one host run as uids %d and %d, want two sandbox uids", a, b)
	}
}
