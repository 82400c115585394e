package envcache_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"

	"github.com/codexec/codexec/envcache"
	"github.com/codexec/codexec/envspec"
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

// A worker's job path: make sure the job's environment exists (built once,
// even when many jobs ask at once), run the job with it, release it.
func ExampleCache_Ensure() {
	cache, err := envcache.New(envcache.Config{Dir: "/var/cache/codexec", BudgetBytes: 50 << 30})
	if err != nil {
		log.Fatal(err)
	}
	if err := cache.Start(context.Background()); err != nil {
		log.Fatal(err) // its directory cannot be made
	}
	defer cache.Close()
	env, err := cache.Ensure(context.Background(), envspec.Spec{Manager: "uv", Python: "3.12", Packages: []string{"numpy"}}, os.Stderr)
	if err != nil {
		log.Fatal(err) // a *envcache.BuildError carries the installer's output
	}
	defer env.Release() // until then, no process evicts it
	cmd := exec.Command(env.Python, "job.py")
	cmd.Env = env.Activation.Apply([]string{"PATH=/usr/bin:/bin", "HOME=/tmp/session"})
	_ = cmd.Run()
}
