package envspec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrMarkerFalse is wrapped by the error for a requirement whose
// environment marker is false where it would be installed: it would
// install nothing.
var ErrMarkerFalse = errors.New("nothing to install")

// MarkerEnv holds the values of the PEP 508 marker variables for one
// interpreter (python_version, sys_platform, ...). "extra" is "" unless
// set: a requirement installed directly, as codexec installs them, is
// installed with no extra.
type MarkerEnv map[string]string

// MarkerEnvScript prints, as JSON, the marker variables of the Python
// that runs it, as PEP 508 defines them.
const MarkerEnvScript = `import json, os, platform, sys
i = sys.implementation
v = "%d.%d.%d" % i.version[:3]
if i.version.releaselevel != "final":
    v += i.version.releaselevel[0] + str(i.version.serial)
print(json.dumps({"implementation_name": i.name, "implementation_version": v,
 "os_name": os.name, "platform_machine": platform.machine(),
 "platform_release": platform.release(), "platform_system": platform.system(),
 "platform_version": platform.version(), "python_full_version": platform.python_version(),
 "platform_python_implementation": platform.python_implementation(),
 "python_version": ".".join(platform.python_version_tuple()[:2]), "sys_platform": sys.platform}))`

// EvalMarker says whether the marker (as Requirement.Marker holds it) is
// true in env. Comparisons of two versions follow PEP 440 (the release
// numbers, pre-releases before their release; "==" and "!=" with ".*"
// compare a prefix); other comparisons compare strings, as the packaging
// library does; "in" and "not in" look for a substring.
func EvalMarker(marker string, env MarkerEnv) (bool, error) {
	if _, reason := parseMarker(marker); reason != "" {
		return false, fmt.Errorf("marker %q: %s", marker, reason)
	}
	e := markerEval{p: markerParser{in: marker}, env: env}
	v := e.or()
	if e.err != nil {
		return false, fmt.Errorf("marker %q: %w", marker, e.err)
	}
	return v, nil
}

type markerEval struct {
	p   markerParser
	env MarkerEnv
	err error
}

func (e *markerEval) or() bool {
	v := e.and()
	for e.p.peek() == "or" {
		e.p.next()
		v = e.and() || v // both sides read, whatever the first
	}
	return v
}

func (e *markerEval) and() bool {
	v := e.atom()
	for e.p.peek() == "and" {
		e.p.next()
		v = e.atom() && v
	}
	return v
}

func (e *markerEval) atom() bool {
	if e.p.peek() == "(" {
		e.p.next()
		v := e.or()
		e.p.next() // ")", checked by parseMarker
		return v
	}
	lhs := e.value()
	op := e.p.next()
	if op == "not" {
		e.p.next()
		op = "not in"
	}
	rhs := e.value()
	v, err := compareMarker(lhs, op, rhs)
	if err != nil && e.err == nil {
		e.err = err
	}
	return v
}

func (e *markerEval) value() string {
	tok := e.p.next()
	if tok != "" && (tok[0] == '"' || tok[0] == '\'') {
		return tok[1 : len(tok)-1]
	}
	return e.env[tok]
}

func compareMarker(lhs, op, rhs string) (bool, error) {
	switch op {
	case "in":
		return strings.Contains(rhs, lhs), nil
	case "not in":
		return !strings.Contains(rhs, lhs), nil
	case "===":
		return lhs == rhs, nil
	}
	if (op == "==" || op == "!=") && strings.HasSuffix(rhs, ".*") {
		l, lok := parseVersion(lhs)
		r, rok := parseVersion(strings.TrimSuffix(rhs, ".*"))
		if lok && rok {
			eq := len(l.release) >= len(r.release) && cmpRelease(l.release[:len(r.release)], r.release) == 0
			return eq == (op == "=="), nil
		}
	}
	l, lok := parseVersion(lhs)
	r, rok := parseVersion(rhs)
	if lok && rok {
		c := cmpVersion(l, r)
		switch op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case "==":
			return c == 0, nil
		case "!=":
			return c != 0, nil
		case ">=":
			return c >= 0, nil
		case ">":
			return c > 0, nil
		case "~=":
			if len(r.release) < 2 {
				return false, fmt.Errorf("~=%s needs at least two release numbers", rhs)
			}
			prefix := r.release[:len(r.release)-1]
			return c >= 0 && len(l.release) >= len(prefix) && cmpRelease(l.release[:len(prefix)], prefix) == 0, nil
		}
	}
	switch op {
	case "<":
		return lhs < rhs, nil
	case "<=":
		return lhs <= rhs, nil
	case "==":
		return lhs == rhs, nil
	case "!=":
		return lhs != rhs, nil
	case ">=":
		return lhs >= rhs, nil
	case ">":
		return lhs > rhs, nil
	}
	return false, fmt.Errorf("%q %s %q compares no versions", lhs, op, rhs)
}

// version is the part of a PEP 440 version markers compare: the release
// numbers and a pre-release (a, b, rc; rank 3 for none, so that 3.13.0rc1
// comes before 3.13.0).
type version struct {
	release []int
	preRank int
	preNum  int
}

func parseVersion(s string) (version, bool) {
	var v version
	v.preRank = 3
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	rel, pre := s, ""
	if i >= 0 {
		rel, pre = s[:i], s[i:]
	}
	if rel == "" {
		return v, false
	}
	for _, part := range strings.Split(rel, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return v, false
		}
		v.release = append(v.release, n)
	}
	if pre != "" {
		for rank, tag := range []string{"a", "b", "rc"} {
			if rest, ok := strings.CutPrefix(pre, tag); ok {
				n, err := strconv.Atoi(rest)
				if err != nil {
					return v, false
				}
				v.preRank, v.preNum = rank, n
				return v, true
			}
		}
		return v, false
	}
	return v, true
}

func cmpRelease(a, b []int) int {
	for i := range max(len(a), len(b)) {
		var x, y int
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

func cmpVersion(a, b version) int {
	if c := cmpRelease(a.release, b.release); c != 0 {
		return c
	}
	switch {
	case a.preRank != b.preRank:
		if a.preRank < b.preRank {
			return -1
		}
		return 1
	case a.preNum != b.preNum:
		if a.preNum < b.preNum {
			return -1
		}
		return 1
	}
	return 0
}
