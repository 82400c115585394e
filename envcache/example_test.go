package envcache_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"

	"github.com/codexec/codexec/envcache"
)

// A worker's start-up: find the configured interpreter, then make sure its
// default venv exists. Workers on one machine may do this at the same time.
func ExampleEnsureVenv() {
	python, err := envcache.ResolvePython("3.12")
	if err != nil {
		log.Fatal(err) // says what was tried: python3.12 on PATH, pyenv versions
	}
	py, err := envcache.EnsureVenv(context.Background(), "/var/cache/codexec/venv-default-3.12", python)
	if err != nil {
		log.Fatal(err) // a *envcache.BuildError carries the installer's output
	}
	fmt.Println("jobs run with", py)
}

// Package arguments from a model are parsed, never passed through: what is
// not a requirement is refused with a message that says why.
func ExampleParseRequirement() {
	for _, s := range []string{"Pandas >= 2.1, <3", "tomli; python_version < '3.11'", "--index-url=https://evil.example", "numpy; rm -rf /"} {
		r, err := envcache.ParseRequirement(s, false)
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
	base := envcache.Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy==1.26.4", "pandas"}}
	child, err := envcache.Derive(base, []string{"numpy>=2", "scipy"})
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
	spec := envcache.Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy"}}
	adverts := []envcache.Advert{
		{WorkerID: "w1", Load: 0, Capabilities: envcache.Capabilities{Managers: []string{"uv"}, Pythons: []string{"3.12.1"}}},
		{WorkerID: "w2", Load: 3, Capabilities: envcache.Capabilities{Managers: []string{"uv"}, Pythons: []string{"3.12.1"}}, Envs: []string{spec.ID()}},
	}
	worker, hit, err := envcache.Choose(adverts, spec, "")
	fmt.Println(worker, hit, err)
	_, _, err = envcache.Choose(adverts, envcache.Spec{Manager: "uv", Python: "3.13"}, "")
	fmt.Println(err)
	// Output:
	// w2 true <nil>
	// envcache: no worker can serve this environment: none of the 2 live workers with the uv manager has Python 3.13 (w1: 3.12.1; w2: 3.12.1)
}

// A worker's job path: make sure the job's environment exists (built once,
// even when many jobs ask at once), run the job with it, release it.
func ExampleCache_Ensure() {
	cache, err := envcache.New(envcache.Config{Dir: "/var/cache/codexec", BudgetBytes: 50 << 30})
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	env, err := cache.Ensure(context.Background(), envcache.Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy"}}, os.Stderr)
	if err != nil {
		log.Fatal(err) // a *envcache.BuildError carries the installer's output
	}
	defer env.Release() // until then, no process evicts it
	cmd := exec.Command(env.Python, "job.py")
	cmd.Env = env.Activation.Apply([]string{"PATH=/usr/bin:/bin", "HOME=/tmp/session"})
	_ = cmd.Run()
}
