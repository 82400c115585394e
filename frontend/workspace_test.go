package frontend

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/codexec/codexec/envspec"
	"github.com/codexec/codexec/statestore"
	"github.com/codexec/codexec/wire"
)

// A session's execution and install jobs go to the worker holding its
// working directory while that worker is alive and consumes its own
// subject, unless the job's environment is held by another worker and not
// by the holder, or the holder cannot build it; otherwise placement
// decides.
func TestWorkspaceHolderRule(t *testing.T) {
	st, err := statestore.OpenBolt(filepath.Join(t.TempDir(), "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	f, err := New(Config{}, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const scope = "s1"
	rec, _ := json.Marshal(wire.Workspace{V: wire.Version, Worker: "w2", Snapshot: "j", Stored: true})
	if err := st.Set(ctx, f.cfg.Keys.Workspace(scope), rec, 0); err != nil {
		t.Fatal(err)
	}
	venv := envspec.Capabilities{Managers: []string{envspec.ManagerVenv}, Pythons: []string{"3.12.1"}}
	adverts := []envspec.Advert{
		{WorkerID: "w1", Targeted: true, Capabilities: venv},
		{WorkerID: "w2", Targeted: true, Capabilities: venv},
	}
	job := func(kind wire.JobKind, scope string, env *envspec.Spec) *wire.Job {
		return &wire.Job{Kind: kind, Scope: scope, Env: env}
	}
	conda := &envspec.Spec{Manager: envspec.ManagerConda, Packages: []string{"numpy"}}
	py312 := &envspec.Spec{Manager: envspec.ManagerVenv, Python: "3.12", Packages: []string{"numpy"}}
	notTargeted := []envspec.Advert{adverts[0], {WorkerID: "w2", Capabilities: venv}}
	id := py312.ID()
	heldByW1 := []envspec.Advert{{WorkerID: "w1", Targeted: true, Capabilities: venv, Envs: []string{id}}, adverts[1]}
	heldByBoth := []envspec.Advert{heldByW1[0], {WorkerID: "w2", Targeted: true, Capabilities: venv, Envs: []string{id}}}
	cases := []struct {
		name    string
		job     *wire.Job
		adverts []envspec.Advert
		want    string
	}{
		{"holder alive", job(wire.KindExecute, scope, nil), adverts, "w2"},
		{"holder can build the environment, nobody holds it", job(wire.KindExecute, scope, py312), adverts, "w2"},
		{"another worker holds the environment", job(wire.KindExecute, scope, py312), heldByW1, ""},
		{"holder holds the environment too", job(wire.KindExecute, scope, py312), heldByBoth, "w2"},
		{"holder cannot run the environment", job(wire.KindExecute, scope, conda), adverts, ""},
		{"holder gone", job(wire.KindExecute, scope, nil), adverts[:1], ""},
		{"holder without its own subject", job(wire.KindExecute, scope, nil), notTargeted, ""},
		{"an install job", job(wire.KindInstall, scope, py312), adverts, "w2"},
		{"an inspection", job(wire.KindInspect, scope, py312), adverts, ""},
		{"a session without a record", job(wire.KindExecute, "s2", nil), adverts, ""},
	}
	for _, c := range cases {
		if got := f.workspaceHolder(ctx, c.job, c.adverts, true); got != c.want {
			t.Errorf("%s: sent to %q, want %q", c.name, got, c.want)
		}
	}
}
