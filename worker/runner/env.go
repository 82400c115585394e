package runner

import (
	"maps"
	"path/filepath"
	"slices"
	"strings"
)

// SystemPath is the part of a job's PATH that follows the environment's own
// bin directory. It is fixed rather than copied from the worker, so what a
// job finds on PATH does not depend on how the worker was started.
const SystemPath = "/usr/local/bin:/usr/bin:/bin"

// localeVars are copied from the worker's environment when set there, so
// that text encoding and time zone match the host.
var localeVars = []string{"LANG", "LC_ALL", "LC_CTYPE", "TZ"}

// managedVars are set by ChildEnv itself; a passthrough name cannot replace
// them with the worker's value (copying the worker's PATH would hide the
// environment's bin directory), only an operator's extra can.
var managedVars = map[string]bool{
	"PATH":             true,
	"HOME":             true,
	"VIRTUAL_ENV":      true,
	"PYTHONIOENCODING": true,
}

// ChildEnv builds the environment for a job from an allowlist: it never copies
// the worker's environment wholesale, so secrets the worker holds (NATS and
// Redis URLs, cloud credentials) do not reach user code.
//
// The result holds:
//   - PATH = venvDir/bin + ":" + SystemPath (just SystemPath when venvDir is
//     empty), and VIRTUAL_ENV = venvDir when venvDir is not empty;
//   - HOME = home, when home is not empty;
//   - PYTHONIOENCODING = utf-8;
//   - LANG, LC_ALL, LC_CTYPE and TZ copied from base when present there, LANG
//     defaulting to C.UTF-8;
//   - each name in passthrough copied from base when present there, except
//     the ones ChildEnv sets itself (PATH, HOME, VIRTUAL_ENV,
//     PYTHONIOENCODING);
//   - extra, the operator's NAME=VALUE pairs, which win over all of the
//     above. Names that are empty or contain '=' or NUL, and values that
//     contain NUL, cannot be passed to a process and are left out; validate
//     them where the configuration is read.
//
// base is in os.Environ form; when a name appears in it more than once the
// last value counts, as in os/exec. The result is sorted by name and holds
// each name once.
func ChildEnv(base []string, venvDir, home string, passthrough []string, extra map[string]string) []string {
	from := make(map[string]string, len(base))
	for _, kv := range base {
		name, value, ok := strings.Cut(kv, "=")
		if ok && validName(name) {
			from[name] = value
		}
	}

	env := make(map[string]string, 8+len(passthrough)+len(extra))
	for _, name := range localeVars {
		if v, ok := from[name]; ok {
			env[name] = v
		}
	}
	if _, ok := env["LANG"]; !ok {
		env["LANG"] = "C.UTF-8"
	}
	for _, name := range passthrough {
		if managedVars[name] {
			continue
		}
		if v, ok := from[name]; ok {
			env[name] = v
		}
	}
	env["PATH"] = SystemPath
	if venvDir != "" {
		env["PATH"] = filepath.Join(venvDir, "bin") + ":" + SystemPath
		env["VIRTUAL_ENV"] = venvDir
	}
	if home != "" {
		env["HOME"] = home
	}
	env["PYTHONIOENCODING"] = "utf-8"
	for name, v := range extra {
		if validName(name) && !strings.ContainsRune(v, 0) {
			env[name] = v
		}
	}

	names := slices.Sorted(maps.Keys(env))
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = name + "=" + env[name]
	}
	return out
}

func validName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "=\x00")
}
