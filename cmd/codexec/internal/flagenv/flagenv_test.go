package flagenv

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
	"time"
)

type values struct {
	s      string
	b      bool
	n      int
	d      time.Duration
	size   int64
	choice string
}

// register registers one flag of each kind, each with its variable
// (TEST_FLAGENV_<KIND>), on a fresh Flags whose help goes to out.
func register(v *values, out *bytes.Buffer) *Flags {
	f := New("codexec test", out)
	f.String(&v.s, "s", "TEST_FLAGENV_S", "def", "a string")
	f.Bool(&v.b, "b", "TEST_FLAGENV_B", false, "a boolean")
	f.Int(&v.n, "n", "TEST_FLAGENV_N", 7, "an integer")
	f.Duration(&v.d, "d", "TEST_FLAGENV_D", time.Second, "a duration")
	f.Bytes(&v.size, "size", "TEST_FLAGENV_SIZE", 1<<20, "a size")
	f.Choice(&v.choice, "choice", "TEST_FLAGENV_CHOICE", "a", []string{"a", "b"}, "a choice")
	return f
}

func TestDefaultsVariablesAndFlags(t *testing.T) {
	for _, env := range []string{"S", "B", "N", "D", "SIZE", "CHOICE"} {
		t.Setenv("TEST_FLAGENV_"+env, "") // empty counts as unset
	}
	var v values
	if err := register(&v, &bytes.Buffer{}).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (values{"def", false, 7, time.Second, 1 << 20, "a"}); v != want {
		t.Errorf("defaults: %+v, want %+v", v, want)
	}

	t.Setenv("TEST_FLAGENV_S", "env")
	t.Setenv("TEST_FLAGENV_B", "true")
	t.Setenv("TEST_FLAGENV_N", "9")
	t.Setenv("TEST_FLAGENV_D", "1m")
	t.Setenv("TEST_FLAGENV_SIZE", "1MB")
	t.Setenv("TEST_FLAGENV_CHOICE", "b")
	v = values{}
	if err := register(&v, &bytes.Buffer{}).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if want := (values{"env", true, 9, time.Minute, 1e6, "b"}); v != want {
		t.Errorf("from variables: %+v, want %+v", v, want)
	}

	// A flag on the command line wins over its variable.
	v = values{}
	f := register(&v, &bytes.Buffer{})
	if err := f.Parse([]string{"-s", "flag", "-b=false", "-n", "3", "-d", "2h", "-size", "512KiB", "--choice", "a"}); err != nil {
		t.Fatal(err)
	}
	if want := (values{"flag", false, 3, 2 * time.Hour, 512 << 10, "a"}); v != want {
		t.Errorf("from flags: %+v, want %+v", v, want)
	}
	if !f.Given("size") || f.Given("nope") {
		t.Errorf("Given: size %v, nope %v", f.Given("size"), f.Given("nope"))
	}
	if f := register(&values{}, &bytes.Buffer{}); f.Parse(nil) != nil || f.Given("size") {
		t.Error("Given(size) without -size on the command line")
	}
}

// A variable that does not parse is a usage error naming the variable, for
// every kind that parses.
func TestBadVariables(t *testing.T) {
	t.Setenv("TEST_FLAGENV_B", "perhaps")
	t.Setenv("TEST_FLAGENV_N", "many")
	t.Setenv("TEST_FLAGENV_D", "soon")
	t.Setenv("TEST_FLAGENV_SIZE", "1.5GiB")
	t.Setenv("TEST_FLAGENV_CHOICE", "c")
	err := register(&values{}, &bytes.Buffer{}).Parse(nil)
	var ue UsageError
	if !errors.As(err, &ue) {
		t.Fatalf("Parse: %v (%T), want a UsageError", err, err)
	}
	for _, want := range []string{
		`$TEST_FLAGENV_B: strconv.ParseBool: parsing "perhaps"`,
		`$TEST_FLAGENV_N: strconv.Atoi: parsing "many"`,
		`$TEST_FLAGENV_D: time: invalid duration "soon"`,
		`$TEST_FLAGENV_SIZE: invalid size "1.5GiB": unknown unit ".5GiB"`,
		`$TEST_FLAGENV_CHOICE: "c" is not one of a, b`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Parse: %v\nlacks %q", err, want)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := register(&values{}, &out).Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	} else if errors.As(err, new(UsageError)) {
		t.Errorf("-h is a UsageError: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-nope"}, "flag provided but not defined: -nope"},
		{[]string{"-n", "x"}, `invalid value "x" for flag -n`},
		{[]string{"-size", "1x"}, `invalid value "1x" for flag -size: invalid size "1x": unknown unit "x"`},
		{[]string{"-size", "-1"}, "negative"},
		{[]string{"-choice", "c"}, `invalid value "c" for flag -choice: "c" is not one of a, b`},
		{[]string{"-s", "x", "extra", "args"}, "unexpected arguments: extra args"},
	} {
		var v values
		err := register(&v, &bytes.Buffer{}).Parse(tc.args)
		var ue UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v (%T), want a UsageError with %q", tc.args, err, err, tc.want)
		}
		if v.size != 1<<20 || v.choice != "a" {
			t.Errorf("%q: a refused value was stored: %+v", tc.args, v)
		}
	}
}

// The help of a flag with a variable ends with " ($VAR)", before the
// default; a flag without one (env "") has its help as given, exactly as
// flag.FlagSet writes it.
func TestHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	var v values
	register(&v, &out).Parse([]string{"-h"})
	for _, want := range []string{
		"  -s string\n    \ta string ($TEST_FLAGENV_S) (default \"def\")\n",
		"  -b\ta boolean ($TEST_FLAGENV_B)\n",
		"  -n int\n    \tan integer ($TEST_FLAGENV_N) (default 7)\n",
		"  -d duration\n    \ta duration ($TEST_FLAGENV_D) (default 1s)\n",
		"  -size value\n    \ta size ($TEST_FLAGENV_SIZE) (default 1MiB)\n",
		"  -choice value\n    \ta choice ($TEST_FLAGENV_CHOICE) (default a)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}

	var got, want bytes.Buffer
	var n, m int
	var s, r string
	f := New("x", &got)
	f.Int(&n, "n", "", 200, "calls")
	f.String(&s, "python", "", "python3", "interpreter")
	f.Parse([]string{"-h"})
	std := flag.NewFlagSet("x", flag.ContinueOnError)
	std.SetOutput(&want)
	std.IntVar(&m, "n", 200, "calls")
	std.StringVar(&r, "python", "python3", "interpreter")
	std.Parse([]string{"-h"})
	if got.String() != want.String() {
		t.Errorf("help without variables:\n%s\nwant, as flag writes it:\n%s", got.String(), want.String())
	}
}

// Bytes writes its default in the largest of KiB and MiB that divides it.
func TestBytesDefault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		def  int64
		want string
	}{{0, "0"}, {1000, "1000"}, {4 << 10, "4KiB"}, {16 << 20, "16MiB"}, {20 << 30, "20480MiB"}} {
		var out bytes.Buffer
		var n int64
		f := New("x", &out)
		f.Bytes(&n, "size", "", tc.def, "a size")
		f.Parse([]string{"-h"})
		if want := "(default " + tc.want + ")\n"; !strings.HasSuffix(out.String(), want) || n != tc.def {
			t.Errorf("Bytes default %d: %q, %d; want the help to end %q", tc.def, out.String(), n, want)
		}
	}
}
