package frontend

import (
	"strings"
	"testing"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

// One caller holds at most a quarter of a frontend's tasks: alice's
// tasks past maxCallerTasks are refused, saying they are hers, and bob's
// task is still taken. Before, alice's 256 waiting tasks took every task
// of the frontend, and every other caller's task was refused until they
// ended.
func TestOneCallerCannotTakeEveryTask(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t) // jobs are queued, and nothing runs them: the tasks wait
	url := serveHTTP(t, jb.f)
	connect := func(token string) *client.Client {
		return httpSessionAs(t, url, token, mcp.LATEST_LEGACY_PROTOCOL_VERSION)
	}
	alice, bob := connect("alice"), connect("bob")
	for i := range maxCallerTasks {
		if resp := taskCall(t, alice, "execute_code", map[string]any{"code": "print(1)"}); resp.Error != nil {
			t.Fatalf("alice's task %d refused: %s", i, resp.Error.Message)
		}
	}
	resp := taskCall(t, alice, "execute_code", map[string]any{"code": "print(1)"})
	if resp.Error == nil || !strings.Contains(resp.Error.Message, "you have too many tasks") {
		t.Fatalf("alice's task past her share: %+v", resp)
	}
	createdTask(t, taskCall(t, bob, "execute_code", map[string]any{"code": "print(1)"}))
}
