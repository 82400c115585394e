package frontend

import (
	"strings"
	"testing"

	"github.com/codexec/codexec/wire"
)

func TestStringListAndParsePackages(t *testing.T) {
	t.Parallel()
	f := &Frontend{cfg: Config{}.WithDefaults()}
	if got, bad := stringList(map[string]any{"packages": []any{"numpy", "pandas>=2"}}, "packages", true); bad != nil || len(got) != 2 {
		t.Fatalf("got %v %v", got, bad)
	}
	if _, bad := stringList(map[string]any{"packages": []any{"numpy", 3}}, "packages", true); bad == nil || !envFailure(bad).IsError {
		t.Fatal("a non-string item was accepted")
	}
	if _, bad := stringList(map[string]any{}, "packages", true); bad == nil {
		t.Fatal("a missing required list was accepted")
	}
	// A string where the schema asks for a list is refused, saying so, for
	// required and optional lists alike; it was once taken as one item.
	for _, required := range []bool{true, false} {
		got, bad := stringList(map[string]any{"packages": "numpy"}, "packages", required)
		if bad == nil {
			t.Fatalf("a string accepted as a list (required %v): %q", required, got)
		}
		if r, ok := envFailure(bad).StructuredContent.(EnvResult); !ok || r.Status != string(wire.StatusRejected) || !strings.Contains(r.Message, "must be a list of strings") {
			t.Errorf("a string (required %v): %+v", required, envFailure(bad).StructuredContent)
		}
	}
	if bad := f.parsePackages([]string{"numpy", "scikit-learn[all]>=1.4; python_version >= '3.9'"}); bad != nil {
		t.Fatalf("good requirements refused: %v", bad)
	}
	for _, item := range []string{"--index-url=https://x", "-e", "./pkg", "/abs/path", "https://x/y.whl", "a @ https://x/a.whl", "a|b", "a b", "$(id)"} {
		bad := f.parsePackages([]string{"numpy", item})
		if bad == nil {
			t.Errorf("%q accepted", item)
			continue
		}
		if r, ok := envFailure(bad).StructuredContent.(EnvResult); !ok || r.Status != string(wire.StatusRejected) || !strings.Contains(r.Message, item) {
			t.Errorf("%q: %+v", item, envFailure(bad).StructuredContent)
		}
	}
	f.cfg.AllowURLRequirements = true
	if bad := f.parsePackages([]string{"a @ https://x.example/a-1.0-py3-none-any.whl"}); bad != nil {
		t.Errorf("URL requirement refused although allowed: %v", bad)
	}
}
