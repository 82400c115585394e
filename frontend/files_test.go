package frontend

import (
	"testing"

	"github.com/codexec/codexec/wire"
)

func TestParseWorkspaceURI(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]wire.FileOp{
		"codexec://workspace/a.txt":                        {Op: wire.FileRead, Path: "a.txt"},
		"codexec://workspace/out/r%C3%A9sum%C3%A9%20x.bin": {Op: wire.FileRead, Path: "out/résumé x.bin"},
		"codexec://workspace/b?offset=10&length=5":         {Op: wire.FileRead, Path: "b", Offset: 10, Length: 5},
		workspaceURI("d/with space?.txt"):                  {Op: wire.FileRead, Path: "d/with space?.txt"},
	} {
		got, h, err := parseWorkspaceURI(uri)
		if err != nil || *got != want || h != "" {
			t.Errorf("%s: %+v, %v; want %+v", uri, got, err, want)
		}
	}
	for _, bad := range []string{"codexec://workspace/", "codexec://workspace/../x", "codexec://workspace/%2E%2E/x",
		"codexec://workspace/a/..%2F..%2Fb", "codexec://workspace//etc/passwd", "codexec://other/a", "file:///etc/passwd",
		"codexec://u@workspace/a", "codexec://workspace/a#f", "codexec://workspace/a?offset=-1", "codexec://workspace/a?length=x",
		"codexec://workspace/a%00b"} {
		if op, _, err := parseWorkspaceURI(bad); err == nil {
			t.Errorf("%s accepted: %+v", bad, op)
		}
	}
}

func TestParseWorkspaceURINamesAHandle(t *testing.T) {
	t.Parallel()
	op, h, err := parseWorkspaceURI("codexec://workspace/out/a.txt?workspace=wsp_01ABC&offset=3")
	if err != nil || op.Path != "out/a.txt" || op.Offset != 3 || h != "wsp_01ABC" {
		t.Fatalf("%+v %q %v", op, h, err)
	}
}
