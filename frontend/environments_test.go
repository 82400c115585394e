package frontend

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/envspec"
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

// get_environment_config shows what the workers offer, but not the
// environments they hold for other sessions: an environment's id is a
// digest of its spec, so the list would confirm a guess of another
// tenant's packages.
func TestEnvironmentConfigHidesOthersEnvironments(t *testing.T) {
	t.Parallel()
	tb := setupTools(t, false)
	others := envspec.Spec{Manager: envspec.ManagerVenv, Packages: []string{"secret-package==1.0"}}
	_, otherID, err := others.Identity()
	if err != nil {
		t.Fatal(err)
	}
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: tb.f.cfg.Pool, Envs: []string{otherID, envspec.DefaultID}})
	if err := tb.f.store.Touch(t.Context(), tb.f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	res, env := callTool[EnvResult](t, tb.c, "get_environment_config", map[string]any{})
	if res.IsError || len(env.Capabilities) != 1 || env.Capabilities[0].WorkerID != "w1" {
		t.Fatalf("get_environment_config: %s", textOf(res))
	}
	if raw, _ := json.Marshal(res); len(env.Capabilities[0].Envs) != 0 || strings.Contains(string(raw), otherID) {
		t.Fatalf("another session's environment %s is shown: %s", otherID, raw)
	}
}

// A caller with credentials, one tenant among others, is shown what the
// workers can run, not their host names nor how busy they and their
// devices are (which tells of other tenants' work). Over stdio, the one
// local user sees it all.
func TestEnvironmentConfigHidesActivityFromTenants(t *testing.T) {
	t.Parallel()
	fx := startQuotaHTTP(t, "")
	f := fx[0].f
	advert, _ := json.Marshal(envspec.Advert{V: wire.Version, WorkerID: "w1", Pool: f.cfg.Pool, Host: "gpu-node-17.internal",
		Load: 3, Warm: 2, GPUWaiting: 4, GPUJobMS: 1234, GPUs: []envspec.GPU{{Index: 0, Model: "NVIDIA H100", Busy: true}}})
	if err := f.store.Touch(t.Context(), f.cfg.Keys.Workers(), "w1", advert, time.Minute); err != nil {
		t.Fatal(err)
	}
	alice, err := fx[0].connect(t, fx[0].tokens["alice"], "")
	if err != nil {
		t.Fatal(err)
	}
	res, env := callTool[EnvResult](t, alice, "get_environment_config", map[string]any{})
	if res.IsError || len(env.Capabilities) != 1 {
		t.Fatalf("get_environment_config: %s", textOf(res))
	}
	c := env.Capabilities[0]
	raw, _ := json.Marshal(res)
	if c.WorkerID != "w1" || len(c.GPUs) != 1 || c.GPUs[0].Model != "NVIDIA H100" {
		t.Fatalf("the worker and its devices are not shown: %s", raw)
	}
	if c.Host != "" || c.Load != 0 || c.Warm != 0 || c.GPUWaiting != 0 || c.GPUJobMS != 0 || c.GPUs[0].Busy || strings.Contains(string(raw), "gpu-node-17") {
		t.Fatalf("a tenant is shown the workers' hosts or activity: %s", raw)
	}
}
