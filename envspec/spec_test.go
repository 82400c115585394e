package envspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestSpecNormalize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   Spec
		want Spec
	}{
		{Spec{Manager: " UV "}, Spec{Manager: "uv"}},
		{Spec{Manager: "venv-uv", Python: "3.12"}, Spec{Manager: "uv", Python: "3.12"}},
		{Spec{Manager: "venv", Packages: []string{"Pandas", "numpy >= 1.26", "pandas"}},
			Spec{Manager: "venv", Packages: []string{"numpy>=1.26", "pandas"}}},
		// The later requirement for a name and marker wins; other markers stay.
		{Spec{Manager: "uv", Packages: []string{"numpy<2", "tomli; python_version<'3.11'", "numpy>=2", "tomli>=2; python_version >= '3.11'"}},
			Spec{Manager: "uv", Packages: []string{"numpy>=2", `tomli; python_version < "3.11"`, `tomli>=2; python_version >= "3.11"`}}},
		// conda keeps its names' underscores and dots.
		{Spec{Manager: "conda", Python: "3.11", Packages: []string{"Python_ABI", "ruamel.yaml>=0.17"}},
			Spec{Manager: "conda", Python: "3.11", Packages: []string{"python_abi", "ruamel.yaml>=0.17"}}},
		{Spec{Manager: "conda", Existing: " datascience "}, Spec{Manager: "conda", Existing: "datascience"}},
		{Spec{Manager: "conda", Existing: "/opt/conda/envs/x"}, Spec{Manager: "conda", Existing: "/opt/conda/envs/x"}},
		{Spec{Manager: "venv", Existing: "/srv/venvs/ds", Parent: "env-0123456789abcdef"},
			Spec{Manager: "venv", Existing: "/srv/venvs/ds", Parent: "env-0123456789abcdef"}},
	} {
		got, err := tt.in.Normalize()
		if err != nil {
			t.Errorf("Normalize(%+v): %v", tt.in, err)
			continue
		}
		if got.Manager != tt.want.Manager || got.Python != tt.want.Python || !slices.Equal(got.Packages, tt.want.Packages) ||
			got.Existing != tt.want.Existing || got.Parent != tt.want.Parent {
			t.Errorf("Normalize(%+v) = %+v, want %+v", tt.in, got, tt.want)
		}
		again, err := got.Normalize()
		if err != nil || !slices.Equal(again.Packages, got.Packages) {
			t.Errorf("Normalize is not idempotent on %+v: %+v, %v", got, again, err)
		}
	}
}

func TestSpecNormalizeRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   Spec
		is   error
		says string
	}{
		{Spec{}, ErrBadSpec, "no manager"},
		{Spec{Manager: "pip"}, ErrBadSpec, `unknown manager "pip"`},
		{Spec{Manager: "uv", Python: "python3.12"}, ErrBadSpec, "not a version"},
		{Spec{Manager: "uv", Python: "3.12; id"}, ErrBadSpec, "not a version"},
		{Spec{Manager: "uv", Packages: []string{"numpy", "--index-url=x"}}, ErrBadRequirement, "options"},
		{Spec{Manager: "uv", Packages: []string{"python>=3.12"}}, ErrBadRequirement, "python field"},
		{Spec{Manager: "conda", Packages: []string{"requests[socks]"}}, ErrBadRequirement, "no extras"},
		{Spec{Manager: "conda", Packages: []string{"tomli; os_name == 'nt'"}}, ErrBadRequirement, "markers"},
		{Spec{Manager: "uv", Parent: "env-xyz"}, ErrBadSpec, "not an environment id"},
		{Spec{Manager: "venv", Existing: "myenv"}, ErrBadSpec, "absolute path"},
		{Spec{Manager: "venv", Existing: "/srv/venvs/../ds"}, ErrBadSpec, "not a clean path"},
		{Spec{Manager: "venv", Existing: "/"}, ErrBadSpec, "root directory"},
		{Spec{Manager: "conda", Existing: "my env"}, ErrBadSpec, "neither a conda environment name"},
		{Spec{Manager: "conda", Existing: "-n"}, ErrBadSpec, "neither a conda environment name"},
		{Spec{Manager: "conda", Existing: "ds\nx"}, ErrBadSpec, "control character"},
		{Spec{Manager: "conda", Existing: "ds", Python: "3.12"}, ErrBadSpec, "leave python empty"},
		{Spec{Manager: "conda", Existing: "ds", Packages: []string{"numpy"}}, ErrExistingEnv, "does not modify it"},
	} {
		_, err := tt.in.Normalize()
		if !errors.Is(err, tt.is) || !errors.Is(err, ErrBadSpec) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("Normalize(%+v): %v, want %v saying %q", tt.in, err, tt.is, tt.says)
		}
		if id := tt.in.ID(); id != "" {
			t.Errorf("ID of an invalid spec = %q", id)
		}
	}
}

func TestSpecIdentity(t *testing.T) {
	t.Parallel()
	spec := Spec{Manager: "uv", Python: "3.12", Packages: []string{"pandas", "numpy>=1.26"}}
	canon, err := spec.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	const wantCanon = `{"v":1,"manager":"uv","python":"3.12","packages":["numpy>=1.26","pandas"],"existing":""}`
	if string(canon) != wantCanon {
		t.Errorf("Canonical = %s, want %s", canon, wantCanon)
	}
	// The ID is part of the on-disk layout and of placement records: it
	// must not change between releases without a reason (bump specVersion).
	const wantID = "env-d8a9b07e74000bf0"
	if id := spec.ID(); id != wantID {
		t.Errorf("ID = %s, want %s", id, wantID)
	}
	for _, same := range []Spec{
		{Manager: "UV", Python: " 3.12", Packages: []string{"numpy >= 1.26", "Pandas"}},
		{Manager: "venv-uv", Python: "3.12", Packages: []string{"pandas", "numpy>=1.26", "pandas"}},
		{Manager: "uv", Python: "3.12", Packages: []string{"numpy>=1.26", "pandas"}, Parent: "env-0123456789abcdef"},
	} {
		if id := same.ID(); id != wantID {
			t.Errorf("ID(%+v) = %s, want %s", same, id, wantID)
		}
	}
	for _, other := range []Spec{
		{Manager: "venv", Python: "3.12", Packages: []string{"numpy>=1.26", "pandas"}},
		{Manager: "uv", Python: "3.12.1", Packages: []string{"numpy>=1.26", "pandas"}},
		{Manager: "uv", Packages: []string{"numpy>=1.26", "pandas"}},
		{Manager: "uv", Python: "3.12", Packages: []string{"numpy>=1.27", "pandas"}},
		{Manager: "uv", Python: "3.12", Packages: []string{"numpy>=1.26", "pandas[excel]"}},
	} {
		if other.ID() == wantID {
			t.Errorf("ID(%+v) equals a different spec's", other)
		}
	}
	if s := spec.String(); s != "uv, Python 3.12, pandas, numpy>=1.26" {
		t.Errorf("String = %q", s)
	}
	if s := (Spec{Manager: "conda", Existing: "ds"}).String(); s != "conda environment ds" {
		t.Errorf("String = %q", s)
	}
	if _, err := (Spec{}).Canonical(); !errors.Is(err, ErrBadSpec) {
		t.Errorf("Canonical of an empty spec: %v", err)
	}
}

func TestDerive(t *testing.T) {
	t.Parallel()
	parent := Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy==1.26.4", "pandas", "tomli; python_version < '3.11'"}}
	child, err := Derive(parent, []string{"numpy>=2", "scipy", "SciPy>=1.13"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"numpy>=2", "pandas", "scipy>=1.13", `tomli; python_version < "3.11"`}
	if child.Manager != "uv" || child.Python != "3.12" || !slices.Equal(child.Packages, want) || child.Parent != parent.ID() {
		t.Errorf("Derive = %+v, want packages %q and parent %s", child, want, parent.ID())
	}
	grandchild, err := Derive(child, []string{"numpy==1.26.4"})
	if err != nil {
		t.Fatal(err)
	}
	if grandchild.Parent != child.ID() || !slices.Contains(grandchild.Packages, "numpy==1.26.4") || slices.Contains(grandchild.Packages, "numpy>=2") {
		t.Errorf("grandchild = %+v", grandchild)
	}
	// Deriving what the parent already has is the parent.
	same, err := Derive(parent, []string{"pandas"})
	if err != nil || same.ID() != parent.ID() {
		t.Errorf("Derive(parent, pandas) = %s, %v; want the parent's ID %s", same.ID(), err, parent.ID())
	}

	conda, err := Derive(Spec{Manager: "conda", Packages: []string{"python_abi"}}, []string{"Ruamel.Yaml"})
	if err != nil || !slices.Equal(conda.Packages, []string{"python_abi", "ruamel.yaml"}) {
		t.Errorf("conda Derive = %+v, %v", conda, err)
	}

	for _, tt := range []struct {
		parent Spec
		extra  []string
		is     error
	}{
		{Spec{Manager: "conda", Existing: "datascience"}, []string{"numpy"}, ErrExistingEnv},
		{Spec{Manager: "venv", Existing: "/srv/venv"}, []string{"numpy"}, ErrExistingEnv},
		{parent, []string{"numpy; rm -rf /"}, ErrBadRequirement},
		{parent, []string{"-r", "reqs.txt"}, ErrBadRequirement},
		{parent, nil, ErrBadSpec},
		{Spec{Manager: "nope"}, []string{"numpy"}, ErrBadSpec},
	} {
		if got, err := Derive(tt.parent, tt.extra); !errors.Is(err, tt.is) {
			t.Errorf("Derive(%+v, %q) = %+v, %v; want %v", tt.parent, tt.extra, got, err, tt.is)
		}
	}
}

func TestSpecRequirementsAppliesURLPolicy(t *testing.T) {
	t.Parallel()
	spec := Spec{Manager: "uv", Packages: []string{"pkg @ https://example.com/pkg-1.0-py3-none-any.whl", "six"}}
	n, err := spec.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if reqs, err := n.Requirements(true); err != nil || len(reqs) != 2 || reqs[0].URL == "" {
		t.Errorf("Requirements(true) = %+v, %v", reqs, err)
	}
	if _, err := n.Requirements(false); !errors.Is(err, ErrBadRequirement) {
		t.Errorf("Requirements(false): %v, want a refusal", err)
	}
}

func TestSpecIdentityInOnePass(t *testing.T) {
	t.Parallel()
	s := Spec{Manager: "venv-uv", Python: "3.12", Packages: []string{"Pandas", "numpy >= 2"}}
	n, id, err := s.Identity()
	want, werr := s.Normalize()
	if err != nil || werr != nil {
		t.Fatalf("Identity: %v; Normalize: %v", err, werr)
	}
	if !slices.Equal(n.Packages, want.Packages) || n.Manager != want.Manager || id != s.ID() || id == "" {
		t.Errorf("Identity = %+v, %q; want %+v, %q", n, id, want, s.ID())
	}
	if _, id, err := (Spec{Manager: "pip"}).Identity(); !errors.Is(err, ErrBadSpec) || id != "" {
		t.Errorf("Identity of a bad spec = %q, %v", id, err)
	}
}
