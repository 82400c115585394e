package frontend

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A stdio client that sends requests without reading the answers makes the
// server stop reading once stdioMaxOwed answers wait, rather than read on,
// each answer held by a goroutine blocked on the full pipe (20,000
// tools/list took a `codexec dev` to 2.4 GiB); every answer still comes
// once the client reads.
func TestStdioUnreadAnswersStopTheReader(t *testing.T) {
	t.Parallel()
	c := serveStdio(t, Config{})
	const n = 4 * stdioMaxOwed
	var sent atomic.Int64
	go func() {
		for i := 1; i <= n; i++ {
			if _, err := c.in.Write([]byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(i) + `,"method":"ping"}` + "\n")); err != nil {
				return
			}
			sent.Store(int64(i))
		}
	}()
	last := int64(-1)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		if s := sent.Load(); s == last || s == n {
			break
		} else {
			last = s
		}
	}
	// The reader's buffer (64 KiB, about 1,500 pings) and the pipe to
	// mcp-go's reader hold a few more than the answers owed.
	if s := sent.Load(); s > 2*stdioMaxOwed+1600 {
		t.Fatalf("the server read %d requests whose answers nobody read (at most %d answers may be owed)", s, stdioMaxOwed)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		m := c.recv(t)
		if m["id"] != nil {
			seen[string(m["id"])] = true
		}
	}
}

// A stdio line longer than the largest legal request is dropped unread,
// answered with an error, and the next request is served: before, a line
// of 400 MiB was held and decoded whole (2 GiB), and nothing bounded it.
func TestStdioLineLongerThanARequestDropped(t *testing.T) {
	t.Parallel()
	c := serveStdio(t, Config{MaxRequestBytes: 1 << 20})
	go func() {
		_, _ = c.in.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("a", 3<<20) + `"}}` + "\n"))
		_, _ = c.in.Write([]byte(`{"jsonrpc":"2.0","id":2,"method":"ping"}` + "\n"))
	}()
	m := c.recv(t)
	if string(m["id"]) != "null" || !strings.Contains(string(m["error"]), "larger than the largest") {
		t.Fatalf("a line of 3 MiB with a limit of 1 MiB was answered %v", m)
	}
	if m = c.recv(t); string(m["id"]) != "2" || m["result"] == nil {
		t.Fatalf("the ping after it was answered %v", m)
	}
}
