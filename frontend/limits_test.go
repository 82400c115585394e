package frontend

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
	"github.com/mark3labs/mcp-go/mcp"
)

func TestLimitsArg(t *testing.T) {
	t.Parallel()
	good := []struct {
		name string
		args map[string]any
		want *wire.Limits
	}{
		{"absent", map[string]any{}, nil},
		{"null", map[string]any{"limits": nil}, nil},
		{"empty", map[string]any{"limits": map[string]any{}}, nil},
		{"every key", map[string]any{"limits": map[string]any{
			"memory_mb": 2048.0, "cpu_seconds": 30.0, "processes": 64.0,
			"file_size_mb": 10.0, "disk_mb": 500.0, "open_files": 256.0,
		}}, &wire.Limits{MemoryMB: 2048, CPUSeconds: 30, Processes: 64, FileSizeMB: 10, DiskMB: 500, OpenFiles: 256}},
		{"one key", map[string]any{"limits": map[string]any{"memory_mb": 1.0}}, &wire.Limits{MemoryMB: 1}},
		{"null value", map[string]any{"limits": map[string]any{"memory_mb": nil, "disk_mb": 3.0}}, &wire.Limits{DiskMB: 3}},
		{"integer types", map[string]any{"limits": map[string]any{"processes": 5, "open_files": int64(6), "disk_mb": json.Number("7")}},
			&wire.Limits{Processes: 5, OpenFiles: 6, DiskMB: 7}},
		{"largest", map[string]any{"limits": map[string]any{"cpu_seconds": float64(1 << 40)}}, &wire.Limits{CPUSeconds: 1 << 40}},
	}
	for _, tc := range good {
		got, bad := limitsArg(tc.args)
		if bad != nil {
			t.Errorf("%s: rejected: %s", tc.name, textOf(execFailure(bad)))
			continue
		}
		if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
			t.Errorf("%s: limitsArg = %+v, want %+v", tc.name, got, tc.want)
		}
	}

	bad := []struct {
		name  string
		value any
		want  []string
	}{
		{"string", "memory_mb=2048", []string{"'limits' must be an object"}},
		{"array", []any{1.0}, []string{"'limits' must be an object"}},
		{"number", 5.0, []string{"'limits' must be an object"}},
		{"unknown key", map[string]any{"memory": 5.0}, []string{`unknown key "memory"`, "memory_mb, cpu_seconds, processes, file_size_mb, disk_mb, open_files"}},
		{"unknown among good", map[string]any{"memory_mb": 5.0, "gpu": 1.0}, []string{`unknown key "gpu"`}},
		{"fraction", map[string]any{"memory_mb": 1.5}, []string{"limits.memory_mb must be a whole number", "not 1.5"}},
		{"zero", map[string]any{"cpu_seconds": 0.0}, []string{"limits.cpu_seconds", "not 0"}},
		{"negative", map[string]any{"processes": -1.0}, []string{"limits.processes", "not -1"}},
		{"negative int", map[string]any{"processes": -3}, []string{"limits.processes", "not -3"}},
		{"absurd", map[string]any{"disk_mb": 1e300}, []string{"limits.disk_mb", "not 1e+300"}},
		{"just above", map[string]any{"disk_mb": float64(1<<40 + 1)}, []string{"limits.disk_mb", "to 1099511627776"}},
		{"string value", map[string]any{"open_files": "1024"}, []string{"limits.open_files", `the string "1024"`}},
		{"bool", map[string]any{"file_size_mb": true}, []string{"limits.file_size_mb", "not true"}},
		{"object value", map[string]any{"memory_mb": map[string]any{"x": 1.0}}, []string{"limits.memory_mb", `{"x":1}`}},
		{"bad number", map[string]any{"memory_mb": json.Number("1.5")}, []string{"limits.memory_mb"}},
	}
	for _, tc := range bad {
		got, err := limitsArg(map[string]any{"limits": tc.value})
		if err == nil {
			t.Errorf("%s: accepted as %+v", tc.name, got)
			continue
		}
		res := execFailure(err)
		if !res.IsError {
			t.Errorf("%s: rejection is not an error", tc.name)
		}
		text := textOf(res)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%s: %q lacks %q", tc.name, text, w)
			}
		}
	}
}

// The tools that run code declare the limits parameter, and refuse bad
// limits before anything runs (the frontend of setupTools has no broker).
func TestLimitsParameter(t *testing.T) {
	t.Parallel()
	tb := setupTools(t, false)
	tools, err := tb.c.ListTools(t.Context(), mcp.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, tool := range tools.Tools {
		if tool.Name != "execute_code" && tool.Name != "execute_code_file" {
			continue
		}
		seen++
		raw, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var schema struct {
			Type       string `json:"type"`
			Required   []string
			Properties map[string]struct {
				Type                 string `json:"type"`
				Description          string `json:"description"`
				AdditionalProperties *bool  `json:"additionalProperties"`
				Properties           map[string]struct {
					Type        string   `json:"type"`
					Minimum     *float64 `json:"minimum"`
					Description string   `json:"description"`
				} `json:"properties"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(raw, &schema); err != nil {
			t.Fatalf("%s: schema %s: %v", tool.Name, raw, err)
		}
		lim, ok := schema.Properties["limits"]
		if !ok || lim.Type != "object" || lim.AdditionalProperties == nil || *lim.AdditionalProperties || lim.Description == "" {
			t.Fatalf("%s: limits parameter %+v in %s", tool.Name, lim, raw)
		}
		for _, r := range schema.Required {
			if r == "limits" {
				t.Errorf("%s: limits is required", tool.Name)
			}
		}
		if len(lim.Properties) != len(limitParams) {
			t.Errorf("%s: limits has %d properties, want %d", tool.Name, len(lim.Properties), len(limitParams))
		}
		for _, p := range limitParams {
			prop, ok := lim.Properties[p.key]
			if !ok || prop.Type != "integer" || prop.Minimum == nil || *prop.Minimum != 1 || prop.Description == "" {
				t.Errorf("%s: limits.%s = %+v", tool.Name, p.key, prop)
			}
		}
		if !strings.Contains(tool.Description, "limits") {
			t.Errorf("%s: description does not mention limits: %q", tool.Name, tool.Description)
		}
	}
	if seen != 2 {
		t.Fatalf("found %d of the tools that run code", seen)
	}

	res, out := callTool[ExecResult](t, tb.c, "execute_code", map[string]any{"code": "print(1)", "limits": map[string]any{"memroy_mb": 10}})
	if !res.IsError || out.Status != string(wire.StatusRejected) || !strings.Contains(out.Message, `unknown key "memroy_mb"`) {
		t.Errorf("execute_code with a misspelt limit: %+v", out)
	}
	if _, fr := callTool[FileResult](t, tb.c, "initialize_code_file", map[string]any{"content": "print(1)\n", "filename": "lim"}); fr.Status != fileStatusOK {
		t.Fatalf("initialize_code_file: %+v", fr)
	}
	res, out = callTool[ExecResult](t, tb.c, "execute_code_file", map[string]any{"file_path": "lim.py", "limits": map[string]any{"cpu_seconds": 0.5}})
	if !res.IsError || out.Status != string(wire.StatusRejected) || !strings.Contains(out.Message, "limits.cpu_seconds") {
		t.Errorf("execute_code_file with a fractional limit: %+v", out)
	}
}
