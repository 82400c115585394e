package frontend

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"

	"github.com/oklog/ulid/v2"
)

// A task-augmented call and a task method reach the router however their
// JSON spells them. Go's decoder, which mcp-go reads a message with, takes
// a key in any case, Unicode's folds ("taſk", with a long s) and escapes
// ("t\u0061sk", "tasks\/get") for the name it stands for, and the router's
// first look at the bytes took only "task" and "tasks/": until 2026-12-05
// mcp-go ran any other spelling as a task of its own, in its memory, for
// good (no ttl), past the bound on tasks, and under the context of the
// request, which cancelled its job at once; one client made 3,400 such
// tasks a second and took a frontend from 200 MiB to 750 MiB in 11 s.
func TestTaskCallsSpelledOtherwiseReachTheRouter(t *testing.T) {
	t.Parallel()
	jb := setupJobs(t, Config{})
	jb.liveWorker(t)
	c := serveStdioFrontend(t, jb.f)
	raw := func(line string) map[string]json.RawMessage {
		t.Helper()
		if _, err := c.in.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		for {
			if m := c.recv(t); m["id"] != nil {
				return m
			}
		}
	}
	ours := func(id string) bool { _, err := ulid.ParseStrict(id); return err == nil }
	spellings := []string{`"Task"`, `"TASK"`, `"t\u0061sk"`, `"taſk"`, `"tas\u212a"`}
	routed, ids := 0, []string{}
	defer func() {
		// The tasks' jobs, queued for a worker that is not there, end.
		// (A job may wait for its turn, and is recorded only then.)
		pending := slices.Clone(ids)
		for round := 0; len(pending) > 0 && round < 1200; round++ {
			pending = slices.DeleteFunc(pending, func(id string) bool {
				if rec, err := jb.b.GetJobRecord(context.Background(), id); err == nil {
					_, _ = jb.b.PutResult(context.Background(), &wire.Result{JobID: id, Scope: rec.Scope, Status: wire.StatusOK})
				}
				_, err := jb.b.GetResult(context.Background(), id)
				return err == nil
			})
			time.Sleep(25 * time.Millisecond)
		}
		// And their tasks have stored their outcomes.
		for n, id := range ids {
			for range 400 {
				m := raw(`{"jsonrpc":"2.0","id":` + strconv.Itoa(100+n) + `,"method":"tasks/get","params":{"taskId":"` + id + `"}}`)
				var task struct {
					Status string `json:"status"`
				}
				if json.Unmarshal(m["result"], &task) == nil && task.Status != "working" {
					break
				}
				time.Sleep(25 * time.Millisecond)
			}
		}
	}()
	for i, key := range spellings {
		m := raw(`{"jsonrpc":"2.0","id":` + strconv.Itoa(1+i) + `,"method":"tools/call","params":{"name":"execute_code","arguments":{"code":"print(1)"},` + key + `:{}}}`)
		var res struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		}
		if err := json.Unmarshal(m["result"], &res); err != nil || res.Task.TaskID == "" {
			t.Errorf("task call with the key %s: answer %s %s", key, m["result"], m["error"])
			continue
		}
		if ours(res.Task.TaskID) {
			routed++
			ids = append(ids, res.Task.TaskID)
		} else {
			t.Errorf("task call with the key %s: task %s is mcp-go's, not the router's", key, res.Task.TaskID)
		}
	}
	m := raw(`{"jsonrpc":"2.0","id":20,"method":"tasks\/list","params":{}}`)
	var list struct {
		Tasks []struct {
			TaskID string `json:"taskId"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(m["result"], &list); err != nil {
		t.Fatalf("tasks\\/list: %s %s", m["result"], m["error"])
	}
	listed := 0
	for _, task := range list.Tasks {
		if ours(task.TaskID) {
			listed++
		}
	}
	if routed != len(spellings) || listed != routed || len(list.Tasks) != listed {
		t.Errorf("%d task calls: %d made by the router; tasks\\/list lists %d tasks, %d of them the router's",
			len(spellings), routed, len(list.Tasks), listed)
	}
}
