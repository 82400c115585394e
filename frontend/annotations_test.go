package frontend

import (
	"testing"
)

// Every tool states all four annotation hints, and states them honestly:
// mcp-go's defaults left a read-only tool saying destructiveHint true. The
// table is what each tool does; a new tool must be added to it.
func TestToolAnnotationsHonest(t *testing.T) {
	t.Parallel()
	// readOnly, destructive, idempotent, openWorld
	want := map[string][4]bool{
		"execute_code":             {false, true, false, true},
		"execute_code_file":        {false, true, false, true},
		"run_in_context":           {false, true, false, true},
		"submit_jobs":              {false, true, true, true},
		"get_job_result":           {true, false, true, false},
		"get_job_results":          {true, false, true, false},
		"read_code_file":           {true, false, true, false},
		"list_code_files":          {true, false, true, false},
		"list_contexts":            {true, false, true, false},
		"get_environment_config":   {true, false, true, false},
		"check_installed_packages": {true, false, true, false},
		"initialize_code_file":     {false, true, false, false},
		"append_to_code_file":      {false, false, false, false},
		"delete_code_file":         {false, true, true, false},
		"upload_file":              {false, true, true, false},
		"cancel_batch":             {false, true, true, false},
		"create_context":           {false, false, false, false},
		"reset_context":            {false, true, true, false},
		"close_context":            {false, true, true, false},
		"configure_environment":    {false, true, true, true},
		"install_dependencies":     {false, true, true, true},
		"workspace_info":           {false, false, true, false},
		"new_workspace":            {false, false, false, false},
	}
	f := newDevFrontend(t, Config{})
	for _, stdio := range []bool{true, false} {
		tools := f.MCPServer(stdio).ListTools()
		if len(tools) != len(want) {
			t.Errorf("stdio=%v: %d tools, the table has %d", stdio, len(tools), len(want))
		}
		for name, st := range tools {
			a := st.Tool.Annotations
			hints := []*bool{a.ReadOnlyHint, a.DestructiveHint, a.IdempotentHint, a.OpenWorldHint}
			w, ok := want[name]
			if !ok {
				t.Errorf("tool %s is not in the table", name)
				continue
			}
			for i, h := range hints {
				if h == nil || *h != w[i] {
					t.Errorf("stdio=%v: %s: hint %d is %v, want %v (annotations %+v)", stdio, name, i, deref(h), w[i], a)
				}
			}
			if is(a.ReadOnlyHint) && (is(a.DestructiveHint) || !is(a.IdempotentHint)) {
				t.Errorf("%s: read-only but destructive or not idempotent", name)
			}
		}
	}
}

func is(b *bool) bool { return b != nil && *b }

func deref(b *bool) any {
	if b == nil {
		return nil
	}
	return *b
}
