package worker

import (
	"testing"

	"github.com/codexec/codexec/envcache"
)

// Only the worker's base environment, which sessions never install into,
// may run its start-up code (.pth import lines, sitecustomize) in its
// privileged zygote; an environment a session derived runs it in each job.
func TestOnlyTheBaseEnvironmentRunsItsStartUpCodeInTheZygote(t *testing.T) {
	w := &Worker{python: "/base/bin/python", venvDir: "/base"}
	if !w.spec("/s/job.py", "/d", "/d").TrustSite {
		t.Error("the base environment's spec does not trust its start-up code")
	}
	env := &envcache.Env{Python: "/envs/derived/bin/python"}
	if w.envSpec(env, "/s/job.py", "/d", "/d").TrustSite {
		t.Error("a derived environment's spec trusts its start-up code: a package a session installed would run in the zygote")
	}
}
