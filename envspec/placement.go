package envspec

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrNoWorker is wrapped by Choose's error when no live worker can serve a
// spec; the message says why.
var ErrNoWorker = errors.New("no worker can serve this environment")

// Capabilities is what a worker can build and run.
type Capabilities struct {
	// Managers are the managers available on the worker ("uv", "venv").
	Managers []string `json:"managers"`
	// Pythons are the versions of the interpreters it has, in full
	// ("3.11.7", "3.12.1").
	Pythons []string `json:"pythons"`
	// Pool is the worker's pool.
	Pool string `json:"pool"`
	// Labels are the operator's labels ("gpu": "1").
	Labels map[string]string `json:"labels,omitempty"`
	// Existing names the environments that exist on the worker without
	// being built: conda environment names and prefixes, venv paths.
	Existing []string `json:"existing,omitempty"`
}

// Advert is a worker's presence record: who it is, what it can build and
// run, which environments it holds ready and how busy it is. A worker
// writes it to the state store's presence set at every heartbeat
// (statestore.Store.Touch); frontends read the live ones (DecodeAdverts) to
// find the workers of a pool and to place jobs (Choose). It is the only
// type of that record.
type Advert struct {
	// V is the wire-protocol version of the worker that wrote it.
	V        int    `json:"v"`
	WorkerID string `json:"worker_id"`
	Pool     string `json:"pool"`
	Host     string `json:"host,omitempty"`
	// Concurrency is how many jobs the worker runs at once.
	Concurrency int `json:"concurrency,omitempty"`
	// Python is the interpreter of the worker's default environment.
	Python    string    `json:"python,omitempty"`
	StartedAt time.Time `json:"started_at"`
	// Capabilities are what it can build: managers, interpreters, labels.
	Capabilities Capabilities `json:"capabilities"`
	// Envs are the IDs of the environments it holds ready (Cache.Held).
	Envs []string `json:"envs,omitempty"`
	// Load is how busy it is (jobs running); lower is preferred.
	Load int `json:"load"`
	// Warm counts its warm interpreters, ready to fork jobs.
	Warm int `json:"warm,omitempty"`
	// Targeted says the worker consumes its own subject
	// (wire.WorkerSubject), so a job may be sent to it alone.
	Targeted bool `json:"targeted,omitempty"`
	// GPUs are the devices it offers jobs (worker/gpu), Busy as of this
	// record; GPUWaiting counts its jobs waiting for a device.
	GPUs       []GPU `json:"gpus,omitempty"`
	GPUWaiting int   `json:"gpu_waiting,omitempty"`
	// GPUJobMS is how long its recent GPU jobs held their devices, on
	// average; 0 before the first.
	GPUJobMS float64 `json:"gpu_job_ms,omitempty"`
}

// DecodeAdverts decodes the data of a presence set's members
// (statestore.Store.Members), each an Advert in JSON, sorted by worker ID.
// A member whose data does not decode is left out; one with no WorkerID
// gets its member name.
func DecodeAdverts(members map[string][]byte) []Advert {
	out := make([]Advert, 0, len(members))
	for member, data := range members {
		var a Advert
		if err := json.Unmarshal(data, &a); err != nil {
			continue
		}
		a.WorkerID = cmp.Or(a.WorkerID, member)
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Advert) int { return cmp.Compare(a.WorkerID, b.WorkerID) })
	return out
}

// Choose picks the worker a job for spec should go to, among adverts (the
// live workers it may go to: the caller picks the pool). specID is
// spec.ID(), or "" to compute it.
//
// It prefers a worker that holds the environment (hit is true), the least
// loaded one, then the one holding fewest environments, then the lowest ID;
// else (by the same order) the worker that can
// build it: it has the spec's manager and, for venv and uv, an interpreter
// of the spec's Python version (conda installs its own). An existing
// environment is never built, so only workers that hold it or advertise it
// in Capabilities.Existing qualify. When none does, the error wraps
// ErrNoWorker and says exactly what is missing where.
func Choose(adverts []Advert, spec Spec, specID string) (workerID string, hit bool, err error) {
	n, err := spec.Normalize()
	if err != nil {
		return "", false, err
	}
	if specID == "" {
		specID = n.id()
	}
	if len(adverts) == 0 {
		return "", false, fmt.Errorf("%w: no live worker", ErrNoWorker)
	}
	best := func(cands []Advert) string {
		return slices.MinFunc(cands, func(a, b Advert) int {
			// Fewer environments held second: with equal loads (loads are
			// sampled at heartbeats, so often all zero), new builds spread
			// over the workers instead of piling onto the lowest ID.
			return cmp.Or(cmp.Compare(a.Load, b.Load), cmp.Compare(len(a.Envs), len(b.Envs)), cmp.Compare(a.WorkerID, b.WorkerID))
		}).WorkerID
	}

	holders := filter(adverts, func(a Advert) bool { return slices.Contains(a.Envs, specID) })
	if len(holders) > 0 {
		return best(holders), true, nil
	}

	if n.Existing != "" {
		has := filter(adverts, func(a Advert) bool { return slices.Contains(a.Capabilities.Existing, n.Existing) })
		if len(has) == 0 {
			return "", false, fmt.Errorf("%w: no live worker has the existing %s environment %q: a worker offers those its operator lists in --existing-envs, "+
				"and builds none on demand (for packages of your own, give type venv-uv with packages, or call install_dependencies); workers have: %s",
				ErrNoWorker, n.Manager, n.Existing, describe(adverts, func(a Advert) []string { return a.Capabilities.Existing }))
		}
		return best(has), false, nil
	}

	withManager := filter(adverts, func(a Advert) bool { return slices.Contains(a.Capabilities.Managers, n.Manager) })
	if len(withManager) == 0 {
		return "", false, fmt.Errorf("%w: none of the %d live workers has the %s manager (%s)",
			ErrNoWorker, len(adverts), n.Manager, describe(adverts, func(a Advert) []string { return a.Capabilities.Managers }))
	}
	if n.Python == "" || n.Manager == ManagerConda {
		return best(withManager), false, nil
	}
	able := filter(withManager, func(a Advert) bool {
		return slices.ContainsFunc(a.Capabilities.Pythons, func(p string) bool { return pythonMatches(p, n.Python) })
	})
	if len(able) == 0 {
		return "", false, fmt.Errorf("%w: none of the %d live workers with the %s manager has Python %s (%s)",
			ErrNoWorker, len(withManager), n.Manager, n.Python, describe(withManager, func(a Advert) []string { return a.Capabilities.Pythons }))
	}
	return best(able), false, nil
}

// filter returns the adverts that keep accepts, in their order.
func filter(adverts []Advert, keep func(Advert) bool) []Advert {
	var out []Advert
	for _, a := range adverts {
		if keep(a) {
			out = append(out, a)
		}
	}
	return out
}

// pythonMatches reports whether an interpreter of version have ("3.12.1")
// satisfies want ("3.12", "3.12.1", "3").
func pythonMatches(have, want string) bool {
	return have == want || strings.HasPrefix(have, want+".")
}

// describe lists what each worker has, for an error message: "w1: a, b;
// w2: none", at most ten workers.
func describe(adverts []Advert, what func(Advert) []string) string {
	const most = 10
	var parts []string
	for i, a := range adverts {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(adverts)-most))
			break
		}
		have := "none"
		if list := what(a); len(list) > 0 {
			have = strings.Join(list, ", ")
		}
		parts = append(parts, a.WorkerID+": "+have)
	}
	return strings.Join(parts, "; ")
}
