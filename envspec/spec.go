package envspec

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Names of the environment managers.
const (
	ManagerVenv  = "venv"  // python -m venv, then pip
	ManagerUV    = "uv"    // uv venv, then uv pip
	ManagerConda = "conda" // conda, mamba or micromamba, by prefix
)

// specVersion is part of every canonical form, so that a change to the
// canonical rules changes every ID instead of silently mapping old IDs to
// new meanings.
const specVersion = 1

// ErrBadSpec is wrapped by the errors of Spec.Normalize (and so of
// Canonical, Derive and Cache.Ensure) for a spec that is not valid.
var ErrBadSpec = errors.New("invalid environment spec")

// ErrExistingEnv is wrapped by the errors for a spec, or a derivation, that
// would install packages into an environment that already exists on the
// workers: codexec never modifies an environment it did not build.
var ErrExistingEnv = errors.New("packages cannot be added to an existing environment")

var (
	versionRe   = regexp.MustCompile(`^[0-9]+(\.[0-9]+){0,2}$`)
	specIDRe    = regexp.MustCompile(`^env-[0-9a-f]{16}$`)
	condaNameRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$`)
)

// DefaultID is the id results and tools give the workers' default
// environment: the one a job without a spec (wire.Job.Env nil) runs in. It is
// never the ID of a Spec ("env-" and hex digits).
const DefaultID = "default"

// IsPythonVersion reports whether s is a Python version as specs name them:
// "3", "3.12" or "3.12.1".
func IsPythonVersion(s string) bool { return versionRe.MatchString(s) }

// IsID reports whether s has the form of a Spec's ID ("env-" and 16 hex
// digits).
func IsID(s string) bool { return specIDRe.MatchString(s) }

// Spec describes an environment: which manager builds it, for which Python,
// with which packages; or which environment that already exists on the
// workers it names. Its identity (Canonical, ID) is content-addressed: two
// specs that normalise to the same form are the same environment.
type Spec struct {
	// Manager is "venv", "uv" or "conda" (any case; "venv-uv" means "uv").
	Manager string `json:"manager"`
	// Python is the version wanted ("3.12", "3.12.1", "3"), or "" for the
	// worker's default interpreter. With "" the environment is "whatever
	// the building worker's default is": give a pool one default, or name
	// the version.
	Python string `json:"python,omitempty"`
	// Packages are requirement strings (see ParseRequirement). They are
	// installed into a fresh environment: for venv and uv from the package
	// index with pip or uv, for conda from conda channels.
	Packages []string `json:"packages,omitempty"`
	// Existing names an environment that already exists on the workers
	// instead of one to build: a venv's absolute path (venv, uv), or a
	// conda environment's name or absolute prefix (conda). Such a spec has
	// no Python and no Packages: codexec never installs into an
	// environment it did not build (ErrExistingEnv).
	Existing string `json:"existing,omitempty"`
	// Parent is the ID of the spec this one was derived from. It is
	// informational, not part of the identity: a cache may use it to build
	// the child from the parent's files (see Cache.Ensure).
	Parent string `json:"parent,omitempty"`
}

// Normalize checks s and returns its canonical form: the manager in lower
// case, Existing cleaned, and the packages parsed and rewritten in
// canonical form (Requirement.String; for conda Requirement.CondaString),
// without duplicates, sorted by name. Two requirements for the same name
// and marker keep the later one; requirements for one name with different
// markers are all kept. URLs are accepted syntactically here (https only);
// whether they may be installed is the caller's policy (see Requirements).
//
// Errors wrap ErrBadSpec, and also ErrBadRequirement for a bad package
// string or ErrExistingEnv for packages on an existing environment.
func (s Spec) Normalize() (Spec, error) {
	bad := func(format string, args ...any) (Spec, error) {
		return Spec{}, fmt.Errorf("%w: %s", ErrBadSpec, fmt.Sprintf(format, args...))
	}
	var n Spec
	switch m := strings.ToLower(strings.TrimSpace(s.Manager)); m {
	case ManagerVenv, ManagerUV, ManagerConda:
		n.Manager = m
	case "venv-uv":
		n.Manager = ManagerUV
	case "":
		return bad("no manager given (venv, uv or conda)")
	default:
		return bad("unknown manager %q (venv, uv or conda)", s.Manager)
	}

	n.Python = strings.TrimSpace(s.Python)
	if n.Python != "" && !versionRe.MatchString(n.Python) {
		return bad("python %q is not a version such as 3.12", s.Python)
	}

	n.Parent = strings.TrimSpace(s.Parent)
	if n.Parent != "" && !specIDRe.MatchString(n.Parent) {
		return bad("parent %q is not an environment id (env- and 16 hex digits)", s.Parent)
	}

	if existing := strings.TrimSpace(s.Existing); existing != "" {
		if err := checkExisting(n.Manager, existing); err != nil {
			return bad("existing environment %q: %v", s.Existing, err)
		}
		n.Existing = existing
		if n.Python != "" {
			return bad("existing environment %q: its Python is its own; leave python empty", existing)
		}
		if len(s.Packages) > 0 {
			return Spec{}, fmt.Errorf("%w: %w: %q exists on the workers and codexec does not modify it; use a venv or uv environment to install packages", ErrBadSpec, ErrExistingEnv, existing)
		}
		return n, nil
	}

	reqs := make([]Requirement, 0, len(s.Packages))
	for _, p := range s.Packages {
		r, err := ParseRequirement(p, true)
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %w", ErrBadSpec, err)
		}
		reqs = append(reqs, r)
	}
	pkgs, err := canonicalPackages(n.Manager, mergeRequirements(nil, reqs))
	if err != nil {
		return Spec{}, err
	}
	n.Packages = pkgs
	return n, nil
}

// canonicalPackages checks reqs for the manager and returns their canonical
// strings, sorted.
func canonicalPackages(manager string, reqs []Requirement) ([]string, error) {
	slices.SortStableFunc(reqs, func(a, b Requirement) int {
		return cmp.Or(cmp.Compare(a.NormName, b.NormName), cmp.Compare(a.String(), b.String()))
	})
	var out []string
	for _, r := range reqs {
		if r.NormName == "python" {
			return nil, fmt.Errorf("%w: %w", ErrBadSpec, &RequirementError{Input: r.String(),
				Reason: "choose the Python version with the spec's python field, not as a package"})
		}
		s := r.String()
		if manager == ManagerConda {
			var err error
			if s, err = r.CondaString(); err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadSpec, err)
			}
		}
		out = append(out, s)
	}
	return slices.Compact(out), nil
}

// mergeRequirements returns base with extra applied: every requirement of
// base for a name that extra mentions is dropped, then extra is added;
// within extra, a later requirement for the same name and marker replaces
// an earlier one.
func mergeRequirements(base, extra []Requirement) []Requirement {
	named := map[string]bool{}
	for _, r := range extra {
		named[r.NormName] = true
	}
	out := slices.DeleteFunc(slices.Clone(base), func(r Requirement) bool { return named[r.NormName] })
	at := map[string]int{}
	for _, r := range extra {
		key := r.NormName + "\x00" + r.Marker
		if i, ok := at[key]; ok {
			out[i] = r
			continue
		}
		at[key] = len(out)
		out = append(out, r)
	}
	return out
}

// checkExisting checks the name of an existing environment for manager.
func checkExisting(manager, existing string) error {
	for i := 0; i < len(existing); i++ {
		if c := existing[i]; c < 0x20 || c == 0x7f {
			return errors.New("contains a control character")
		}
	}
	if filepath.IsAbs(existing) {
		if filepath.Clean(existing) != existing {
			return fmt.Errorf("not a clean path (did you mean %s?)", filepath.Clean(existing))
		}
		if filepath.Dir(existing) == existing {
			return errors.New("the root directory is not an environment")
		}
		return nil
	}
	if manager == ManagerConda {
		if !condaNameRe.MatchString(existing) {
			return errors.New("neither a conda environment name (letters, digits, . _ -) nor an absolute prefix")
		}
		return nil
	}
	return errors.New("a venv is named by its absolute path")
}

// canonicalSpec is the encoded identity: fixed field order, every field
// present.
type canonicalSpec struct {
	V        int      `json:"v"`
	Manager  string   `json:"manager"`
	Python   string   `json:"python"`
	Packages []string `json:"packages"`
	Existing string   `json:"existing"`
}

// Canonical returns the canonical encoding of s: compact JSON of the
// normalised manager, python, packages and existing name, with a format
// version. Parent is not part of it. Equal encodings mean the same
// environment.
func (s Spec) Canonical() ([]byte, error) {
	n, err := s.Normalize()
	if err != nil {
		return nil, err
	}
	return n.canonical(), nil
}

// canonical encodes a spec that is already normalised.
func (s Spec) canonical() []byte {
	c := canonicalSpec{V: specVersion, Manager: s.Manager, Python: s.Python, Packages: s.Packages, Existing: s.Existing}
	if c.Packages == nil {
		c.Packages = []string{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // keep ">=" readable: the form is hashed, and read by people
	if err := enc.Encode(c); err != nil {
		panic("envspec: encoding a spec: " + err.Error()) // strings only: cannot fail
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// ID returns the environment's identity: "env-" and the first 16 hex digits
// of the SHA-256 of Canonical. It returns "" for a spec that does not
// normalise; call Normalize to learn why.
func (s Spec) ID() string {
	n, err := s.Normalize()
	if err != nil {
		return ""
	}
	return n.id()
}

// Identity returns s normalised and its ID in one pass (ID alone normalises
// again): for callers on a job's path that need both.
func (s Spec) Identity() (Spec, string, error) {
	n, err := s.Normalize()
	if err != nil {
		return Spec{}, "", err
	}
	return n, n.id(), nil
}

// id hashes a spec that is already normalised.
func (s Spec) id() string {
	sum := sha256.Sum256(s.canonical())
	return "env-" + hex.EncodeToString(sum[:8])
}

// Requirements parses the packages of s. With allowURLs false a "name @
// URL" package is refused; use it to apply the URL policy of a frontend or
// worker to a spec that came from elsewhere.
func (s Spec) Requirements(allowURLs bool) ([]Requirement, error) {
	out := make([]Requirement, 0, len(s.Packages))
	for _, p := range s.Packages {
		r, err := ParseRequirement(p, allowURLs)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// String describes the spec for logs and messages: "uv, Python 3.12,
// numpy, pandas>=2" or "conda environment ds".
func (s Spec) String() string {
	if s.Existing != "" {
		return fmt.Sprintf("%s environment %s", s.Manager, s.Existing)
	}
	py := "default Python"
	if s.Python != "" {
		py = "Python " + s.Python
	}
	if len(s.Packages) == 0 {
		return fmt.Sprintf("%s, %s, no packages", s.Manager, py)
	}
	return fmt.Sprintf("%s, %s, %s", s.Manager, py, strings.Join(s.Packages, ", "))
}

// Derive returns the spec of parent with the extra packages added: the
// same manager and Python, the parent's packages with extra applied (a
// requirement in extra replaces every parent requirement for the same
// name), and Parent set to the parent's ID. Installing packages into a
// session's environment is a Derive: environments are never modified.
//
// A parent naming an existing environment cannot be derived from
// (ErrExistingEnv): its packages are the operator's and codexec does not
// install into it. A child venv built with --system-site-packages would not
// see a venv parent's packages (only its base interpreter's), so there is
// no honest way to layer on one; choose a venv or uv environment instead.
func Derive(parent Spec, extra []string) (Spec, error) {
	p, err := parent.Normalize()
	if err != nil {
		return Spec{}, fmt.Errorf("parent: %w", err)
	}
	if p.Existing != "" {
		return Spec{}, fmt.Errorf("%w: %w: %q exists on the workers and codexec does not modify it; configure a venv or uv environment to install packages", ErrBadSpec, ErrExistingEnv, p.Existing)
	}
	if len(extra) == 0 {
		return Spec{}, fmt.Errorf("%w: no packages to add", ErrBadSpec)
	}
	base, err := p.Requirements(true)
	if err != nil {
		return Spec{}, fmt.Errorf("%w: parent: %w", ErrBadSpec, err)
	}
	add := make([]Requirement, 0, len(extra))
	for _, e := range extra {
		r, err := ParseRequirement(e, true)
		if err != nil {
			return Spec{}, fmt.Errorf("%w: %w", ErrBadSpec, err)
		}
		add = append(add, r)
	}
	pkgs, err := canonicalPackages(p.Manager, mergeRequirements(base, add))
	if err != nil {
		return Spec{}, err
	}
	return Spec{Manager: p.Manager, Python: p.Python, Packages: pkgs, Parent: p.id()}, nil
}
