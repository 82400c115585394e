package main

import (
	"strings"
	"testing"

	"github.com/codexec/codexec/frontend"
)

// `codexec dev` with a 64 KiB session budget, over MCP: three runs of one
// 20 KiB code count once, so a 40 KiB file still fits beside them; an append
// past the budget is refused with the figures; a new code that does not fit
// drops the oldest runs, and every run listed reads back its code.
func TestStorageBudgetDev(t *testing.T) {
	t.Parallel()
	c, _ := devStdio(t, t.TempDir(), "CODEXEC_MAX_SESSION_STORAGE=64KiB")
	codeA := "print('a')\n#" + strings.Repeat("a", 20<<10) + "\n"
	var first []string
	for range 3 {
		res, er := call(t, c, "execute_code", map[string]any{"code": codeA})
		if res.IsError || er.Stdout != "a\n" {
			t.Fatalf("execute_code: isError=%v %+v", res.IsError, er)
		}
		first = append(first, er.JobID)
	}
	res, fr := callAs[frontend.FileResult](t, c, "initialize_code_file", map[string]any{"content": strings.Repeat("#", 40<<10), "filename": "f.py"})
	if res.IsError {
		t.Fatalf("a 40 KiB file beside three runs of one 20 KiB code: %+v", fr)
	}
	res, fr = callAs[frontend.FileResult](t, c, "append_to_code_file", map[string]any{"file_path": "f.py", "content": strings.Repeat("#", 8<<10)})
	if !res.IsError || fr.Status != "limit" || !strings.Contains(fr.Message, "the limit is 65536 bytes") {
		t.Fatalf("append past the session budget: isError=%v %+v", res.IsError, fr)
	}
	for _, id := range first {
		res, fr := callAs[frontend.FileResult](t, c, "read_code_file", map[string]any{"job_id": id})
		if res.IsError || text(res) != codeA {
			t.Fatalf("read_code_file(job_id=%s): isError=%v %+v", id, res.IsError, fr)
		}
	}

	codeB := "print('b')\n#" + strings.Repeat("b", 20<<10) + "\n"
	res, er := call(t, c, "execute_code", map[string]any{"code": codeB})
	if res.IsError || er.Stdout != "b\n" {
		t.Fatalf("execute_code: isError=%v %+v", res.IsError, er)
	}
	_, lr := callAs[frontend.ListResult](t, c, "list_code_files", nil)
	if len(lr.Runs) != 1 || lr.Runs[0].JobID != er.JobID {
		t.Fatalf("runs after a new code needed the room of the old ones: %+v", lr.Runs)
	}
	res, _ = callAs[frontend.FileResult](t, c, "read_code_file", map[string]any{"job_id": er.JobID})
	if res.IsError || text(res) != codeB {
		t.Fatalf("read_code_file of the new run: isError=%v", res.IsError)
	}
}
