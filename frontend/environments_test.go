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

// configure_environment with type default goes back to the workers' default
// environment, which takes no Python version, packages or existing
// environment: one given is refused, saying what to give instead, and the
// session's environment is left as it was. Until 2026-12-05 they were
// ignored, and {"type": "default", "packages": ["numpy"]} answered "the
// session now uses the workers' default environment" without numpy.
func TestConfigureDefaultRefusesWhatItWouldIgnore(t *testing.T) {
	t.Parallel()
	b := setupTools(t, false)
	spec := &envspec.Spec{Manager: envspec.ManagerUV, Python: "3.12"}
	if err := b.f.setSessionEnv(t.Context(), "local", spec, "env-0123456789abcdef"); err != nil {
		t.Fatal(err)
	}
	for _, args := range []map[string]any{
		{"type": "default", "python_version": "3.12"},
		{"type": "default", "packages": []any{"numpy"}},
		{"type": "default", "venv_path": "/opt/venv"},
	} {
		res, env := callTool[EnvResult](t, b.c, "configure_environment", args)
		if !res.IsError || env.Status != "rejected" || !strings.Contains(env.Message, "type default takes no") ||
			!strings.Contains(env.Message, "nothing was changed") {
			t.Errorf("configure_environment %v: isError=%v %+v; want rejected", args, res.IsError, env)
		}
	}
	if _, env := callTool[EnvResult](t, b.c, "get_environment_config", map[string]any{}); env.Spec == nil || env.Spec.Python != "3.12" {
		t.Errorf("after the refusals the session's environment is %+v, want the one it had", env)
	}
	// Empty values, as a client that sends every field may, still pass.
	res, env := callTool[EnvResult](t, b.c, "configure_environment",
		map[string]any{"type": "default", "python_version": "", "packages": []any{}, "conda_name": nil})
	if res.IsError || env.EnvID != envspec.DefaultID {
		t.Errorf("type default with empty fields: isError=%v %+v", res.IsError, env)
	}
}
