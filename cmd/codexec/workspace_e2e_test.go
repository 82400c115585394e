package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/mark3labs/mcp-go/client"
)

// A session's working directory persists between its calls in a cluster:
// a file written by one call is there for every later call, whichever
// worker runs it (the frontend sends a session's calls to the worker that
// holds its directory), and is still there after that worker is killed
// (another worker restores the snapshot taken after the writing call,
// before its result was stored).
func TestClusterWorkspacePersists(t *testing.T) {
	t.Parallel()
	for _, workers := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d workers", workers), func(t *testing.T) {
			t.Parallel()
			cl := startCluster(t, workers)
			c := httpClient(t, cl.mcpURL)

			res, er := call(t, c, "execute_code", map[string]any{"code": "open('note.txt', 'w').write('kept')"})
			if res.IsError {
				t.Fatalf("write: %+v", er)
			}
			holder := er.WorkerID
			found, on := readNote(t, c, 20)
			t.Logf("%d workers: %d of 20 reads found the file (ran on %v)", workers, found, on)
			if found != 20 {
				t.Errorf("%d of 20 reads found the file written by the session's first call (ran on %v)", found, on)
			}
			if on[holder] != 20 {
				t.Errorf("the session's calls left %s, the worker holding its files: %v", holder, on)
			}

			var idx int
			if _, err := fmt.Sscanf(holder, "w%d", &idx); err != nil || idx < 1 || idx > workers {
				t.Fatalf("the write ran on %q", holder)
			}
			cl.workers[idx-1].signal(syscall.SIGKILL)
			found, on = readNote(t, c, 20)
			t.Logf("%d workers, %s killed: %d of 20 reads found the file (ran on %v)", workers, holder, found, on)
			if found != 20 || on[holder] > 0 {
				t.Errorf("after %s was killed, %d of 20 reads found the file (ran on %v)", holder, found, on)
			}
			// One restore in all, by the worker that took over; none while
			// the session stayed on one worker.
			restores := 0
			for _, w := range cl.workers {
				restores += strings.Count(w.Out.String(), `msg="workspace restored"`)
			}
			if restores != 1 {
				t.Errorf("%d restores of the session's files, want 1", restores)
			}
		})
	}
}

// readNote reads note.txt in n calls of c's session, and returns how many
// found it and the workers the calls ran on.
func readNote(t *testing.T, c *client.Client, n int) (int, map[string]int) {
	t.Helper()
	found, on := 0, map[string]int{}
	for i := 0; i < n; i++ {
		res, er := call(t, c, "execute_code", map[string]any{
			"code": "import os\nprint(open('note.txt').read() if os.path.exists('note.txt') else 'MISSING')"})
		if res.IsError {
			t.Errorf("read %d: %+v", i, er)
			continue
		}
		on[er.WorkerID]++
		if strings.TrimSpace(er.Stdout) == "kept" {
			found++
		}
	}
	return found, on
}
