package envcache_test

import (
	"context"
	"fmt"
	"log"

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
