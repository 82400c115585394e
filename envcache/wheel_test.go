package envcache

import (
	"testing"

	"github.com/codexec/codexec/internal/wheeltest"
)

// testWheels are the packages of the test wheelhouse:
//   - alpha needs gamma, so installing alpha exercises dependency
//     resolution;
//   - scikit-fake provides the import name skfake (top_level.txt), like
//     scikit-learn provides sklearn;
//   - Odd_Name has no top_level.txt: its import names (oddmod, oddsingle)
//     come from RECORD;
//   - beta exists in two versions, for replacement.
var testWheels = []wheeltest.Wheel{
	{Dist: "alpha", Version: "1.0", Module: "alpha", Requires: []string{"gamma>=1.0"}, TopLevel: true},
	{Dist: "gamma", Version: "1.0", Module: "gamma", TopLevel: true},
	{Dist: "beta", Version: "1.0", Module: "beta", TopLevel: true},
	{Dist: "beta", Version: "2.0", Module: "beta", TopLevel: true},
	{Dist: "scikit-fake", Version: "1.0", Module: "skfake", TopLevel: true},
	{Dist: "Odd_Name", Version: "0.3", Module: "oddmod", Single: "oddsingle"},
}

// setupWheelhouse writes the test wheels into a new directory.
func setupWheelhouse(tb testing.TB) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, w := range testWheels {
		w.Write(tb, dir)
	}
	return dir
}

// wheelhouseIndex installs from the wheelhouse only: no network.
func wheelhouseIndex(dir string) IndexConfig {
	return IndexConfig{NoIndex: true, FindLinks: []string{dir}}
}
