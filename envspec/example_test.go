package envspec_test

import (
	"fmt"
	"log"

	"github.com/codexec/codexec/envspec"
)

// Package arguments from a model are parsed, never passed through: what is
// not a requirement is refused with a message that says why.
func ExampleParseRequirement() {
	for _, s := range []string{"Pandas >= 2.1, <3", "tomli; python_version < '3.11'", "--index-url=https://evil.example", "numpy; rm -rf /"} {
		r, err := envspec.ParseRequirement(s, false)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(r)
	}
	// Output:
	// pandas<3,>=2.1
	// tomli; python_version < "3.11"
	// invalid package requirement "--index-url=https://evil.example": options are not accepted (only package requirements, such as numpy or pandas>=2.1)
	// invalid package requirement "numpy; rm -rf /": the environment marker after ";" is not valid: the character '/' is not allowed
}

// install_dependencies never changes an environment: it derives a new spec,
// whose ID says where it is cached.
func ExampleDerive() {
	base := envspec.Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy==1.26.4", "pandas"}}
	child, err := envspec.Derive(base, []string{"numpy>=2", "scipy"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(child.Packages)
	fmt.Println(child.Parent == base.ID(), child.ID() != base.ID())
	// Output:
	// [numpy>=2 pandas scipy]
	// true true
}

// A frontend places a job on a live worker that holds its environment, else
// on one that can build it.
func ExampleChoose() {
	spec := envspec.Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy"}}
	adverts := []envspec.Advert{
		{WorkerID: "w1", Load: 0, Capabilities: envspec.Capabilities{Managers: []string{"uv"}, Pythons: []string{"3.12.1"}}},
		{WorkerID: "w2", Load: 3, Capabilities: envspec.Capabilities{Managers: []string{"uv"}, Pythons: []string{"3.12.1"}}, Envs: []string{spec.ID()}},
	}
	worker, hit, err := envspec.Choose(adverts, spec, "")
	fmt.Println(worker, hit, err)
	_, _, err = envspec.Choose(adverts, envspec.Spec{Manager: "uv", Python: "3.13"}, "")
	fmt.Println(err)
	// Output:
	// w2 true <nil>
	// no worker can serve this environment: none of the 2 live workers with the uv manager has Python 3.13 (w1: 3.12.1; w2: 3.12.1)
}
