package runner

import (
	"slices"
	"strings"
	"testing"
)

func TestChildEnv(t *testing.T) {
	t.Parallel()
	base := []string{
		"PATH=/root/.pyenv/shims:/usr/bin",
		"HOME=/root",
		"TZ=Europe/Paris",
		"LC_ALL=de_DE.UTF-8",
		"NATS_URL=nats://user:pw@nats:4222",
		"CODEXEC_REDIS_URL=redis://:pw@redis:6379/0",
		"AWS_SECRET_ACCESS_KEY=hunter2",
		"HTTPS_PROXY=http://old-proxy:3128",
		"HTTPS_PROXY=http://proxy:3128", // the last one counts, as in os/exec
		"=C:=C:\\",                      // no name: ignored
		"garbage",
	}
	got := ChildEnv(base, "/var/cache/codexec/default", "/srv/sessions/abc",
		[]string{"HTTPS_PROXY", "NOT_SET", "PATH", "HOME"},
		map[string]string{"MPLBACKEND": "Agg", "TZ": "UTC", "BAD=NAME": "x", "": "y"})
	want := []string{
		"HOME=/srv/sessions/abc",
		"HTTPS_PROXY=http://proxy:3128",
		"LANG=C.UTF-8",
		"LC_ALL=de_DE.UTF-8",
		"MPLBACKEND=Agg",
		"PATH=/var/cache/codexec/default/bin:/usr/local/bin:/usr/bin:/bin",
		"PYTHONIOENCODING=utf-8",
		"TZ=UTC",
		"VIRTUAL_ENV=/var/cache/codexec/default",
	}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv =\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestChildEnvDoesNotLeakSecrets(t *testing.T) {
	t.Parallel()
	secrets := []string{"NATS_URL", "CODEXEC_REDIS_URL", "AWS_SECRET_ACCESS_KEY"}
	base := []string{"NATS_URL=nats://x", "CODEXEC_REDIS_URL=redis://x", "AWS_SECRET_ACCESS_KEY=k", "LANG=en_US.UTF-8"}

	leaked := func(env []string) map[string]bool {
		names := map[string]bool{}
		for _, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			if slices.Contains(secrets, name) {
				names[name] = true
			}
		}
		return names
	}
	if got := leaked(ChildEnv(base, "/venv", "/home", nil, nil)); len(got) != 0 {
		t.Errorf("leaked %v without a passthrough", got)
	}
	// An operator who names one in passthrough gets exactly that one.
	if got := leaked(ChildEnv(base, "/venv", "/home", []string{"AWS_SECRET_ACCESS_KEY"}, nil)); len(got) != 1 || !got["AWS_SECRET_ACCESS_KEY"] {
		t.Errorf("passthrough of AWS_SECRET_ACCESS_KEY gave %v", got)
	}
}

func TestChildEnvMinimal(t *testing.T) {
	t.Parallel()
	// No venv, no home, nothing in base: still a usable environment.
	got := ChildEnv(nil, "", "", nil, nil)
	want := []string{"LANG=C.UTF-8", "PATH=" + SystemPath, "PYTHONIOENCODING=utf-8"}
	if !slices.Equal(got, want) {
		t.Errorf("ChildEnv = %q, want %q", got, want)
	}
}

func TestChildEnvSortedByName(t *testing.T) {
	t.Parallel()
	// "A1=..." sorts before "A=..." as a string; by name, A comes first.
	got := ChildEnv(nil, "", "", nil, map[string]string{"A": "1", "A1": "2", "A_B": "3"})
	var names []string
	for _, kv := range got {
		name, _, _ := strings.Cut(kv, "=")
		names = append(names, name)
	}
	if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
		t.Errorf("names not sorted and unique: %q", names)
	}
	if names[0] != "A" || names[1] != "A1" {
		t.Errorf("names = %q", names)
	}
}
