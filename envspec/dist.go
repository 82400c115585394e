package envspec

import (
	"slices"
	"strings"
)

// Dist is one installed distribution.
type Dist struct {
	// Name is the distribution name as its metadata gives it
	// ("scikit-learn").
	Name string `json:"name"`
	// Version is its version ("1.5.2").
	Version string `json:"version"`
	// Imports are the top-level modules and packages it provides
	// ("sklearn"), sorted; empty when its metadata does not say.
	Imports []string `json:"imports,omitempty"`
	// Channel is where conda got it ("conda-forge", "pypi"); "" for venv
	// and uv.
	Channel string `json:"channel,omitempty"`
}

// Lookup finds the distribution that nameOrImport names: first by
// distribution name (normalised, so "Scikit_Learn" finds scikit-learn),
// then by import name ("sklearn" finds scikit-learn; "yaml" finds PyYAML),
// then, for a dotted module name ("google.protobuf"), by its top-level name
// (the first distribution providing "google"). It reports false when none
// does.
func Lookup(dists []Dist, nameOrImport string) (Dist, bool) {
	q := strings.TrimSpace(nameOrImport)
	if q == "" {
		return Dist{}, false
	}
	norm := NormalizeName(q)
	for _, d := range dists {
		if NormalizeName(d.Name) == norm {
			return d, true
		}
	}
	for _, d := range dists {
		if slices.Contains(d.Imports, q) {
			return d, true
		}
	}
	if top, _, dotted := strings.Cut(q, "."); dotted {
		for _, d := range dists {
			if slices.Contains(d.Imports, top) {
				return d, true
			}
		}
	}
	return Dist{}, false
}
