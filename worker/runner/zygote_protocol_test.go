package runner

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// zygoteProtocolJSON is the one description of the zygote's control
// protocol; zygote.py is checked against it by testdata/test_zygote.py.
//
//go:embed zygote_protocol.json
var zygoteProtocolJSON []byte

type protocolField struct {
	Type     string `json:"type"`
	Required *bool  `json:"required"`
	Nullable bool   `json:"nullable"`
}

type protocolObject struct {
	From   string                   `json:"from"` // messages only
	FDs    []string                 `json:"fds"`  // messages only
	Body   string                   `json:"body"` // messages only: the object after the header and a newline
	Fields map[string]protocolField `json:"fields"`
}

type protocolSpec struct {
	Transport struct {
		MaxDatagramBytes int `json:"max_datagram_bytes"`
	} `json:"transport"`
	Bootstrap struct {
		Code string `json:"code"`
	} `json:"bootstrap"`
	Objects  map[string]protocolObject `json:"objects"`
	Messages map[string]protocolObject `json:"messages"`
}

func loadProtocol(t *testing.T) protocolSpec {
	t.Helper()
	var spec protocolSpec
	dec := json.NewDecoder(bytes.NewReader(zygoteProtocolJSON))
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("zygote_protocol.json: %v", err)
	}
	if len(spec.Messages) == 0 || len(spec.Objects) == 0 {
		t.Fatal("zygote_protocol.json describes no messages or no objects")
	}
	for _, set := range []map[string]protocolObject{spec.Objects, spec.Messages} {
		for name, o := range set {
			for fname, f := range o.Fields {
				if f.Type == "" || f.Required == nil {
					t.Fatalf("zygote_protocol.json: %s.%s has no type or no required", name, fname)
				}
			}
		}
	}
	return spec
}

// protocolNames maps the Go structs that encode the description's objects
// to their names there.
var protocolNames = map[reflect.Type]string{
	reflect.TypeFor[zygoteConfig]():     "config",
	reflect.TypeFor[zygoteSandboxCfg](): "sandbox",
	reflect.TypeFor[Confinement]():      "confine",
	reflect.TypeFor[zygoteJob]():        "job",
}

// protocolType spells a Go type in the description's type language.
func protocolType(t reflect.Type) (string, error) {
	if t == reflect.TypeFor[Bind]() {
		return "tuple<string,bool>", nil // its MarshalJSON; TestZygoteProtocolGo checks it
	}
	if name, ok := protocolNames[t]; ok {
		return name, nil
	}
	if t == reflect.TypeFor[[]byte]() {
		return "string", nil // base64, as encoding/json writes a []byte
	}
	switch t.Kind() {
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		return "bool", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "int", nil
	case reflect.Float32, reflect.Float64:
		return "float", nil
	case reflect.Pointer:
		return protocolType(t.Elem())
	case reflect.Slice:
		e, err := protocolType(t.Elem())
		return "list<" + e + ">", err
	case reflect.Array:
		e, err := protocolType(t.Elem())
		return "tuple<" + strings.Repeat(e+",", t.Len()-1) + e + ">", err
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return "", fmt.Errorf("%s: keys must be strings", t)
		}
		e, err := protocolType(t.Elem())
		return "map<" + e + ">", err
	}
	return "", fmt.Errorf("%s has no name in zygote_protocol.json", t)
}

// goField is one JSON field of a Go struct.
type goField struct {
	typ       string
	omitempty bool
}

func goFields(t *testing.T, v any) map[string]goField {
	t.Helper()
	rt := reflect.TypeOf(v)
	out := make(map[string]goField)
	for i := range rt.NumField() {
		f := rt.Field(i)
		tag, ok := f.Tag.Lookup("json")
		if !ok || !f.IsExported() {
			t.Fatalf("%s.%s has no json tag", rt, f.Name)
		}
		if tag == "-" {
			continue // never encoded: kept on the Go side (Confinement.Session)
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" || name == "-" {
			t.Fatalf("%s.%s: json tag %q names no field", rt, f.Name, tag)
		}
		typ, err := protocolType(f.Type)
		if err != nil {
			t.Fatalf("%s.%s: %v", rt, f.Name, err)
		}
		out[name] = goField{typ: typ, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")}
	}
	return out
}

func normType(s string) string { return strings.ReplaceAll(s, " ", "") }

// checkEncoder checks that v, which the worker encodes, has exactly the
// fields of want, of their types, and sends every required one.
func checkEncoder(t *testing.T, what string, v any, want map[string]protocolField) {
	t.Helper()
	got := goFields(t, v)
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)); !slices.Equal(g, w) {
		t.Errorf("%s: %T has fields %v, zygote_protocol.json %v", what, v, g, w)
	}
	for name, f := range want {
		g, ok := got[name]
		if !ok {
			continue
		}
		if g.typ != normType(f.Type) {
			t.Errorf("%s.%s: %T says %s, zygote_protocol.json %s", what, name, v, g.typ, f.Type)
		}
		if g.omitempty == *f.Required {
			t.Errorf("%s.%s: omitempty is %v, but required is %v", what, name, g.omitempty, *f.Required)
		}
	}
}

// TestZygoteProtocolGo checks that the Go side of the zygote's protocol
// (zygote_protocol.go) is exactly what zygote_protocol.json describes.
func TestZygoteProtocolGo(t *testing.T) {
	spec := loadProtocol(t)

	// What the worker sends.
	for op, v := range map[string]any{opRun: zygoteRunHeader{}, opKill: zygoteKill{}} {
		m, ok := spec.Messages[op]
		if !ok || m.From != "worker" {
			t.Fatalf("zygote_protocol.json: no %s message from the worker", op)
		}
		checkEncoder(t, op, v, m.Fields)
	}
	if fds := spec.Messages[opRun].FDs; !slices.Equal(fds, []string{"stdin", "stdout", "stderr"}) {
		t.Errorf("run carries %v; Zygote.Run sends stdin, stdout, stderr", fds)
	}
	if body := spec.Messages[opRun].Body; body != "job" {
		t.Errorf("run's body is %q; Zygote.Run sends a job after the header", body)
	}
	checkEncoder(t, "job", zygoteJob{}, spec.Objects["job"].Fields)
	checkEncoder(t, "config", zygoteConfig{}, spec.Objects["config"].Fields)
	checkEncoder(t, "sandbox", zygoteSandboxCfg{}, spec.Objects["sandbox"].Fields)
	checkEncoder(t, "confine", Confinement{}, spec.Objects["confine"].Fields)
	if len(spec.Objects) != len(protocolNames) {
		t.Errorf("zygote_protocol.json has %d objects, the Go side %d", len(spec.Objects), len(protocolNames))
	}

	// What the zygote sends: zygoteMsg decodes all of it, so its fields
	// are the union of theirs, each of one type.
	union := make(map[string]string)
	var fromZygote []string
	for op, m := range spec.Messages {
		if m.From != "zygote" {
			continue
		}
		fromZygote = append(fromZygote, op)
		if len(m.FDs) != 0 {
			t.Errorf("%s carries descriptors; the worker reads none", op)
		}
		for name, f := range m.Fields {
			if prev, ok := union[name]; ok && prev != normType(f.Type) {
				t.Errorf("field %s is a %s in one message and a %s in %s", name, prev, f.Type, op)
			}
			union[name] = normType(f.Type)
		}
	}
	got := goFields(t, zygoteMsg{})
	if g, w := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(union)); !slices.Equal(g, w) {
		t.Errorf("zygoteMsg has fields %v, the zygote's messages %v", g, w)
	}
	for name, typ := range union {
		if g, ok := got[name]; ok && g.typ != typ {
			t.Errorf("zygoteMsg.%s is a %s, zygote_protocol.json says %s", name, g.typ, typ)
		}
	}
	ops := []string{opReady, opStarted, opFailed, opExited, opRun, opKill}
	if g, w := slices.Sorted(slices.Values(ops)), slices.Sorted(maps.Keys(spec.Messages)); !slices.Equal(g, w) {
		t.Errorf("the Go side knows ops %v, zygote_protocol.json %v", g, w)
	}
	for _, op := range []string{opReady, opStarted, opFailed, opExited} {
		if !slices.Contains(fromZygote, op) {
			t.Errorf("%s is not a message from the zygote in zygote_protocol.json", op)
		}
	}
	// A failed message may name no job (id null): it must decode, to an id
	// that no job has (they start at 1).
	var m zygoteMsg
	if err := json.Unmarshal([]byte(`{"op":"failed","id":null,"error":"malformed run request"}`), &m); err != nil || m.ID != 0 {
		t.Errorf("failed with id null: %+v, %v", m, err)
	}

	// Encoded, the messages have exactly the described fields: Bind's
	// MarshalJSON included, and a request without optional parts sends
	// the required ones all the same.
	z := &Zygote{}
	full := Spec{
		Script: "/s/job.py", Dir: "/s", Env: []string{"A=1"}, Rlimits: []Rlimit{{Resource: 4, Cur: 0, Max: RlimInfinity}},
		Confine: &Confinement{UID: 1000, GID: 1000, Binds: []Bind{{Path: "/s", Write: true}}, Cgroups: []string{"/c"}, Unmount: []string{"/u"}, TmpSize: 1, Session: "tenant:me:the-session"},
	}
	// Every optional field of the header: the mount clones' count is
	// there where this process can make them (root), as a worker that
	// sends them would.
	if mountClonesWork() {
		dir := t.TempDir()
		cz := &Zygote{clones: true, cfg: ZygoteConfig{Sandbox: &SandboxConfig{Hidden: []string{filepath.Dir(dir)}}}}
		cfull := full
		c := *full.Confine
		c.Binds = []Bind{{Path: dir, Write: true}}
		cfull.Confine, cfull.Dir = &c, dir
		checkRunRequest(t, cz, cfull, true, spec)
	} else {
		checkRunRequest(t, z, full, false, spec)
		checkEncoded(t, zygoteRunHeader{Op: opRun, ID: 1, Net: "k", Unmount: []string{"/u"}, Context: true, Clones: 2}, spec.Messages[opRun].Fields, spec, true)
	}
	checkRunRequest(t, z, Spec{Script: "/s/job.py", Dir: "/s"}, false, spec)
	checkEncoded(t, zygoteKill{Op: opKill, ID: 1}, spec.Messages[opKill].Fields, spec, true)
	cfg := zygoteConfig{Preload: []string{"json"}, Sandbox: &zygoteSandboxCfg{NetNS: true, Hidden: []string{"/h"}, Keep: []Bind{{Path: "/tmp/k"}}, Rootless: true, Seccomp: []byte{6, 0, 0, 0, 0, 0, 0xff, 0x7f}, Spares: 1, InterpreterInit: true, Clones: true}}
	checkEncoded(t, cfg, spec.Objects["config"].Fields, spec, true)
	checkEncoded(t, zygoteConfig{Preload: []string{}}, spec.Objects["config"].Fields, spec, false)

	if zygoteBootstrap != spec.Bootstrap.Code {
		t.Errorf("zygoteBootstrap is %q, zygote_protocol.json's bootstrap %q", zygoteBootstrap, spec.Bootstrap.Code)
	}
	if maxZygoteRequest != spec.Transport.MaxDatagramBytes {
		t.Errorf("maxZygoteRequest is %d, zygote_protocol.json says %d", maxZygoteRequest, spec.Transport.MaxDatagramBytes)
	}
}

// checkRunRequest encodes a run request for s and checks both its parts
// against the description, and that the session's name is not in it.
func checkRunRequest(t *testing.T, z *Zygote, s Spec, full bool, spec protocolSpec) {
	t.Helper()
	data, clones, err := z.runRequest(1, s, full)
	if err != nil {
		t.Fatal(err)
	}
	closeFDs(clones)
	if c := s.Confine; z.clones && c != nil && len(clones) != len(c.Binds) {
		t.Errorf("%d mount clones for %d binds", len(clones), len(c.Binds))
	}
	head, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok || bytes.Contains(body, []byte("\n")) {
		t.Fatalf("run request %q is not a header, a newline and a body", data)
	}
	for _, part := range []struct {
		data   []byte
		fields map[string]protocolField
	}{{head, spec.Messages[opRun].Fields}, {body, spec.Objects["job"].Fields}} {
		var obj any
		if err := json.Unmarshal(part.data, &obj); err != nil {
			t.Fatalf("%q: %v", part.data, err)
		}
		if err := checkObject(obj, part.fields, spec, full); err != nil {
			t.Errorf("run request part %s: %v", part.data, err)
		}
	}
	if c := s.Confine; c != nil && c.Session != "" && bytes.Contains(data, []byte(c.Session)) {
		t.Errorf("the run request names the session %q: %s", c.Session, data)
	}
}

// checkEncoded marshals v and checks the result against fields: every
// required field present, no other, and with full every optional one too;
// values are checked against the described types.
func checkEncoded(t *testing.T, v any, fields map[string]protocolField, spec protocolSpec, full bool) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var obj any
	if err := json.Unmarshal(data, &obj); err != nil {
		t.Fatal(err)
	}
	if err := checkObject(obj, fields, spec, full); err != nil {
		t.Errorf("%T encodes as %s: %v", v, data, err)
	}
}

func checkObject(v any, fields map[string]protocolField, spec protocolSpec, full bool) error {
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%v is not an object", v)
	}
	for name := range obj {
		if _, ok := fields[name]; !ok {
			return fmt.Errorf("unknown field %s", name)
		}
	}
	for name, f := range fields {
		val, ok := obj[name]
		switch {
		case !ok && (*f.Required || full):
			return fmt.Errorf("no %s", name)
		case !ok:
		case val == nil && f.Nullable:
		default:
			if err := checkValue(val, normType(f.Type), spec, full); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// checkValue checks a decoded JSON value against a type of the
// description.
func checkValue(v any, typ string, spec protocolSpec, full bool) error {
	if o, ok := spec.Objects[typ]; ok {
		return checkObject(v, o.Fields, spec, full)
	}
	name, args, generic := strings.Cut(typ, "<")
	if generic {
		args = strings.TrimSuffix(args, ">")
	}
	bad := fmt.Errorf("%v is not a %s", v, typ)
	switch name {
	case "string":
		if _, ok := v.(string); !ok {
			return bad
		}
	case "bool":
		if _, ok := v.(bool); !ok {
			return bad
		}
	case "int", "float":
		f, ok := v.(float64)
		if !ok || name == "int" && f != float64(int64(f)) {
			return bad
		}
	case "list":
		l, ok := v.([]any)
		if !ok {
			return bad
		}
		for _, e := range l {
			if err := checkValue(e, args, spec, full); err != nil {
				return err
			}
		}
	case "map":
		m, ok := v.(map[string]any)
		if !ok {
			return bad
		}
		for _, e := range m {
			if err := checkValue(e, args, spec, full); err != nil {
				return err
			}
		}
	case "tuple":
		l, ok := v.([]any)
		elems := strings.Split(args, ",") // tuples here hold no generics
		if !ok || len(l) != len(elems) {
			return bad
		}
		for i, e := range l {
			if err := checkValue(e, elems[i], spec, full); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("unknown type %s", typ)
	}
	return nil
}

// TestZygoteProtocolPython runs testdata/test_zygote.py: zygote.py driven
// on its own over its socket, and checked against zygote_protocol.json.
func TestZygoteProtocolPython(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("zygotes need Linux")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI needs python3: %v", err)
		}
		t.Skipf("no python3: %v", err)
	}
	cmd := exec.Command(py, "testdata/test_zygote.py", "-v")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s testdata/test_zygote.py: %v\n%s", py, err, out)
	}
	// The Python tests never skip: a skip is a check that did not run.
	if !bytes.HasSuffix(bytes.TrimSpace(out), []byte("\nOK")) {
		t.Fatalf("testdata/test_zygote.py did not end with a plain OK:\n%s", out)
	}
	t.Logf("%s", out)
}
