package envcache

import (
	"context"
	"fmt"
	"github.com/codexec/codexec/envspec"
	"testing"
)

// benchDerive measures building a child environment of a cached parent
// with one more small package, each iteration a new spec (beta!=0.0.N
// resolves to the same beta, so the work is the same and the ID is new).
// seeded says whether the child names its parent (so venv copies it).
func benchDerive(b *testing.B, manager string, seeded bool) {
	if manager == envspec.ManagerUV {
		setupUV(b)
	}
	dir := b.TempDir()
	_, _, managers := realManagers(dir)
	c, _ := setupCache(b, Config{Dir: dir, Managers: managers, Index: wheelhouseIndex(setupWheelhouse(b)), BudgetBytes: -1})
	parentSpec := envspec.Spec{Manager: manager, Packages: []string{"alpha", "scikit-fake"}}
	ensure(b, c, parentSpec).Release()
	child := func(i int) envspec.Spec {
		s, err := envspec.Derive(parentSpec, []string{fmt.Sprintf("beta!=0.0.%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		if !seeded {
			s.Parent = ""
		}
		return s
	}
	ensure(b, c, child(0)).Release() // warm the installers' caches with beta

	b.ResetTimer()
	i := 1
	for b.Loop() {
		ensure(b, c, child(i)).Release()
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/op")
}

// BenchmarkDeriveUV: uv venv, then uv pip install of the parent's packages
// and one more, all hard-linked from uv's warm cache.
func BenchmarkDeriveUV(b *testing.B) { benchDerive(b, envspec.ManagerUV, true) }

// BenchmarkDeriveVenvPip: a venv child built from scratch: python -m venv
// (ensurepip) and pip install of all its packages from local wheels.
func BenchmarkDeriveVenvPip(b *testing.B) { benchDerive(b, envspec.ManagerVenv, false) }

// BenchmarkDeriveVenvSeed: a venv child built from its cached parent:
// python -m venv --without-pip, a hard-linked copy of the parent, and pip
// install of the one new package.
func BenchmarkDeriveVenvSeed(b *testing.B) { benchDerive(b, envspec.ManagerVenv, true) }

// BenchmarkEnsureHeld: Ensure and Release of an environment that is ready
// and held: what every job after the first pays.
func BenchmarkEnsureHeld(b *testing.B) {
	f := &fakeManager{}
	c, _ := setupCache(b, Config{Managers: fakeManagers(f)})
	spec := envspec.Spec{Manager: "venv", Packages: []string{"numpy>=1.26", "pandas"}}
	hold := ensure(b, c, spec)
	defer hold.Release()
	ctx := context.Background()
	for b.Loop() {
		env, err := c.Ensure(ctx, spec, nil)
		if err != nil {
			b.Fatal(err)
		}
		env.Release()
	}
}
