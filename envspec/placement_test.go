package envspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestChoose(t *testing.T) {
	t.Parallel()
	spec := Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy"}}
	id := spec.ID()
	caps := func(managers string, pythons ...string) Capabilities {
		return Capabilities{Managers: strings.Split(managers, ","), Pythons: pythons, Pool: "default"}
	}
	w := func(name string, load int, c Capabilities, envs ...string) Advert {
		return Advert{WorkerID: name, Pool: "default", Capabilities: c, Envs: envs, Load: load}
	}
	for _, tt := range []struct {
		name    string
		adverts []Advert
		spec    Spec
		want    string
		hit     bool
		says    string // for an error
	}{
		{name: "a holder wins over an idle builder", spec: spec, want: "busy-holder", hit: true, adverts: []Advert{
			w("idle", 0, caps("uv", "3.12.1")),
			w("busy-holder", 7, caps("uv", "3.12.1"), "env-0000000000000000", id),
		}},
		{name: "the least loaded holder", spec: spec, want: "h2", hit: true, adverts: []Advert{
			w("h1", 3, caps("uv", "3.12.1"), id), w("h2", 1, caps("uv", "3.12.1"), id), w("h3", 1, caps("uv", "3.12.1"), id),
		}},
		{name: "else the least loaded builder", spec: spec, want: "b2", adverts: []Advert{
			w("b1", 2, caps("uv,venv", "3.11.7", "3.12.1")), w("b2", 0, caps("uv", "3.12.4")),
			w("no-uv", 0, caps("venv", "3.12.1")), w("no-312", 0, caps("uv", "3.11.7")),
		}},
		{name: "any python for a spec without one", spec: Spec{Manager: "venv"}, want: "a", adverts: []Advert{
			w("a", 0, caps("venv")), w("b", 1, caps("venv", "3.12.1")),
		}},
		{name: "a major version matches its minors", spec: Spec{Manager: "uv", Python: "3"}, want: "b", adverts: []Advert{
			w("a", 0, caps("uv", "2.7.18")), w("b", 1, caps("uv", "3.12.1")),
		}},
		{name: "3.1 is not 3.12", spec: Spec{Manager: "uv", Python: "3.1"}, says: "none of the 1 live workers with the uv manager has Python 3.1 (a: 3.12.1)", adverts: []Advert{
			w("a", 0, caps("uv", "3.12.1")),
		}},
		{name: "conda brings its own python", spec: Spec{Manager: "conda", Python: "3.13"}, want: "c", adverts: []Advert{
			w("c", 4, caps("conda", "3.11.7")), w("u", 0, caps("uv", "3.13.0")),
		}},
		{name: "an existing environment only where it exists", spec: Spec{Manager: "conda", Existing: "ds"}, want: "has-ds", adverts: []Advert{
			w("other", 0, Capabilities{Managers: []string{"conda"}, Existing: []string{"ml"}}),
			w("has-ds", 5, Capabilities{Managers: []string{"conda"}, Existing: []string{"base", "ds"}}),
		}},
		{name: "no worker has the existing environment", spec: Spec{Manager: "conda", Existing: "ds"},
			says: `no live worker has the existing conda environment "ds": a worker offers those its operator lists in --existing-envs, ` +
				`and builds none on demand (for packages of your own, give type venv-uv with packages, or call install_dependencies); workers have: a: ml; b: none`,
			adverts: []Advert{w("a", 0, Capabilities{Existing: []string{"ml"}}), w("b", 0, caps("conda"))}},
		{name: "nobody has the manager", spec: spec,
			says:    "none of the 2 live workers has the uv manager (a: venv; b: venv, conda)",
			adverts: []Advert{w("a", 0, caps("venv", "3.12.1")), w("b", 0, caps("venv,conda", "3.12.1"))}},
		{name: "nobody has the python", spec: spec,
			says:    "none of the 2 live workers with the uv manager has Python 3.12 (a: 3.10.13, 3.11.7; b: none)",
			adverts: []Advert{w("a", 0, caps("uv", "3.10.13", "3.11.7")), w("b", 0, caps("uv")), w("c", 0, caps("venv", "3.12.1"))}},
		{name: "no workers", spec: spec, says: "no live worker"},
	} {
		got, hit, err := Choose(tt.adverts, tt.spec, "")
		if tt.says != "" {
			if !errors.Is(err, ErrNoWorker) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("%s: Choose = %q, %v, %v; want an error saying %q", tt.name, got, hit, err, tt.says)
			}
			continue
		}
		if err != nil || got != tt.want || hit != tt.hit {
			t.Errorf("%s: Choose = %q, %v, %v; want %q, %v", tt.name, got, hit, err, tt.want, tt.hit)
		}
	}
	if _, _, err := Choose([]Advert{w("a", 0, caps("uv"))}, Spec{Manager: "nope"}, ""); !errors.Is(err, ErrBadSpec) {
		t.Errorf("Choose with a bad spec: %v", err)
	}
	// specID given: used as is.
	if got, hit, err := Choose([]Advert{w("a", 0, caps("uv"), "env-given")}, spec, "env-given"); err != nil || got != "a" || !hit {
		t.Errorf("Choose with a given ID = %q, %v, %v", got, hit, err)
	}
}

func TestChooseDescribesAtMostTenWorkers(t *testing.T) {
	t.Parallel()
	var adverts []Advert
	for i := range 13 {
		adverts = append(adverts, Advert{WorkerID: string(rune('a' + i)), Capabilities: Capabilities{Managers: []string{"venv"}}})
	}
	_, _, err := Choose(adverts, Spec{Manager: "uv"}, "")
	if err == nil || !strings.Contains(err.Error(), "j: venv; and 3 more") {
		t.Errorf("err = %v", err)
	}
}

func TestDecodeAdverts(t *testing.T) {
	t.Parallel()
	a, err := json.Marshal(Advert{WorkerID: "w1", Pool: "gpu", Load: 2, Envs: []string{"env-0123456789abcdef"},
		Capabilities: Capabilities{Managers: []string{"uv"}, Pythons: []string{"3.12.1"}, Labels: map[string]string{"gpu": "1"}}})
	if err != nil {
		t.Fatal(err)
	}
	got := DecodeAdverts(map[string][]byte{"w1": a, "w0": []byte(`{"pool":"gpu"}`), "bad": []byte("not json")})
	if len(got) != 2 || got[0].WorkerID != "w0" || got[1].WorkerID != "w1" || got[1].Capabilities.Labels["gpu"] != "1" || got[1].Load != 2 {
		t.Errorf("DecodeAdverts = %+v", got)
	}
}

// The errors of placement reach the caller as they are: execute_code with
// a GPU no worker has answered "[rejected: envspec: no live worker has
// the GPUs asked for: ...]", configure_environment "... envspec: no
// worker can serve this environment: ...", the name of a Go package in a
// sentence for a model or a user. They read without it now, and so do the
// errors of a spec that reach the caller the same way.
func TestPlacementErrorsNameNoPackage(t *testing.T) {
	t.Parallel()
	adverts := []Advert{{WorkerID: "a", Targeted: true, Capabilities: Capabilities{Managers: []string{"venv"}}}}
	_, _, err := Choose(adverts, Spec{Manager: "uv"}, "")
	_, gerr := ChooseGPU(adverts, GPURequest{Count: 1})
	_, xerr := (Spec{Manager: "venv", Existing: "/opt/env", Packages: []string{"six"}}).Normalize()
	_, berr := (Spec{Manager: "nope"}).Normalize()
	for _, e := range []error{err, gerr, xerr, berr} {
		if e == nil || strings.Contains(e.Error(), "envspec") {
			t.Errorf("placement error %v: want one that names no package", e)
		}
	}
}
