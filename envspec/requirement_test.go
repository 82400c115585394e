package envspec

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseRequirementAccepts(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, want string
		urls     bool
	}{
		{in: "numpy", want: "numpy"},
		{in: "  NumPy  ", want: "numpy"},
		{in: "Scikit_Learn", want: "scikit-learn"},
		{in: "zope.interface", want: "zope-interface"},
		{in: "a", want: "a"},
		{in: "requests[socks, Security]", want: "requests[security,socks]"},
		{in: "requests[security,security]", want: "requests[security]"},
		{in: "requests[]", want: "requests"},
		{in: "pandas >= 2.1 , < 3", want: "pandas<3,>=2.1"},
		{in: "pandas<3,>=2.1,<3", want: "pandas<3,>=2.1"},
		{in: "numpy==1.26.*", want: "numpy==1.26.*"},
		{in: "numpy!=1.*", want: "numpy!=1.*"},
		{in: "torch==2.1.0+CPU", want: "torch==2.1.0+cpu"},
		{in: "Django~=4.2", want: "django~=4.2"},
		{in: "pkg===weird.1", want: "pkg===weird.1"},
		{in: "pkg>=1.0rc1", want: "pkg>=1.0rc1"},
		{in: "pkg>=1.0.post2.dev3", want: "pkg>=1.0.post2.dev3"},
		{in: "pkg>=v1.0", want: "pkg>=v1.0"},
		{in: "tomli; python_version < '3.11'", want: `tomli; python_version < "3.11"`},
		{in: `tomli>=2;python_version<"3.11"and(os_name=="posix" or sys_platform == 'win32')`,
			want: `tomli>=2; python_version < "3.11" and (os_name == "posix" or sys_platform == "win32")`},
		{in: `colorama; "win" in sys_platform`, want: `colorama; "win" in sys_platform`},
		{in: `x; platform_machine not in "x86_64, aarch64"`, want: `x; platform_machine not in "x86_64, aarch64"`},
		{in: "pkg @ https://example.com/pkg-1.0-py3-none-any.whl", want: "pkg@https://example.com/pkg-1.0-py3-none-any.whl", urls: true},
		{in: "pkg[x]@https://example.com/p.whl#sha256=abc ; python_version >= '3.9'",
			want: `pkg[x]@https://example.com/p.whl#sha256=abc ; python_version >= "3.9"`, urls: true},
	} {
		r, err := ParseRequirement(tt.in, tt.urls)
		if err != nil {
			t.Errorf("ParseRequirement(%q): %v", tt.in, err)
			continue
		}
		if got := r.String(); got != tt.want {
			t.Errorf("ParseRequirement(%q).String() = %q, want %q", tt.in, got, tt.want)
		}
		again, err := ParseRequirement(r.String(), tt.urls)
		if err != nil || again.String() != r.String() {
			t.Errorf("canonical %q does not re-parse to itself: %q, %v", r.String(), again.String(), err)
		}
	}
}

func TestParseRequirementFields(t *testing.T) {
	t.Parallel()
	r, err := ParseRequirement("Foo.Bar[Baz_X] >=1.0, <2 ; python_version<'3.12'", false)
	if err != nil {
		t.Fatal(err)
	}
	want := Requirement{Name: "Foo.Bar", NormName: "foo-bar", Extras: []string{"baz-x"},
		Specifier: "<2,>=1.0", Marker: `python_version < "3.12"`}
	if r.Name != want.Name || r.NormName != want.NormName || !slices.Equal(r.Extras, want.Extras) ||
		r.Specifier != want.Specifier || r.Marker != want.Marker || r.URL != "" {
		t.Errorf("got %+v, want %+v", r, want)
	}
}

func TestParseRequirementRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in, says string
		urls     bool
	}{
		{"", "empty", false},
		{"   ", "empty", false},
		{strings.Repeat("a", 201), "longer than 200", false},
		{"--index-url=https://evil.example/simple", "options are not accepted", false},
		{"-e .", "options are not accepted", false},
		{"-r requirements.txt", "options are not accepted", false},
		{"--extra-index-url", "options are not accepted", false},
		{"./mypkg", "local paths", false},
		{".", "local paths", false},
		{"/etc/passwd", "local paths", false},
		{"~/pkg", "local paths", false},
		{`\\server\share`, "local paths", false},
		{"C:\\pkg", "local paths", false},
		{"file:///tmp/x.whl", "file:", false},
		{"FILE:x", "file:", false},
		{"evil.whl", "local file name", false},
		{"pkg-1.0.tar.gz", "local file name", false},
		{"https://evil.example/x.whl", "URLs are not accepted", false},
		{"git+https://github.com/x/y", "URLs are not accepted", false},
		{"https://evil.example/x.whl", "must be given as name @", true},
		{"pkg @ https://evil.example/x.whl", "not allowed here", false},
		{"pkg @ http://evil.example/x.whl", "only https", true},
		{"pkg @ https://user:pw@evil.example/x.whl", "credentials", true},
		{"pkg @ https://evil.example/x.whl?a=1&b=2", "not allowed in a package URL", true},
		{"pkg @ https://evil.example/x.whl other", "second item", true},
		{"pkg @ ", "no URL", true},
		{"numpy pandas", `second item "pandas" after "numpy"`, false},
		{"numpy>=1.0 pandas", "second item", false},
		{"rm -rf /", "second item", false},
		{"numpy; rm -rf /", "environment marker", false},
		{"numpy && id", "metacharacter '&'", false},
		{"numpy|id", "metacharacter '|'", false},
		{"numpy$(id)", "metacharacter '$'", false},
		{"numpy`id`", "metacharacter '`'", false},
		{"numpy'", "metacharacter '\\''", false},
		{`numpy"`, "metacharacter '\"'", false},
		{"numpy?", "metacharacter '?'", false},
		{"numpy{a}", "metacharacter '{'", false},
		{"numpy (>=1.0)", "metacharacter '('", false},
		{"numpy #comment", "metacharacter '#'", false},
		{"numpy>", "no version", false},
		{"numpy>=1.0,", "empty version clause", false},
		{"numpy=1.26", "single = is conda's syntax", false},
		{"numpy>=1.*", "not a valid version for >=", false},
		{"numpy>=1.0+local", "not a valid version for >=", false},
		{"numpy==1.*.3", "not a valid version", false},
		{"numpy==1.0a.*", "wildcard", false},
		{"numpy~=1", "two release numbers", false},
		{"numpy==1!2.0", "epochs", false},
		{"numpy==abc", "not a valid version", false},
		{"numpy<>1", "not a valid version", false},
		{"numpy*", "expected a version specifier", false},
		{"numpy!", "not start with a version operator", false},
		{"numpy-", "not a valid package name", false},
		{"_numpy", "not a valid package name", false},
		{"numpy[dev", "no closing ]", false},
		{"numpy[d!v]", "not a valid extra name", false},
		{"numpy\nsix", "line break", false},
		{"numpy\x00", "NUL", false},
		{"numpy\t>=1", "tab", false},
		{"numpy\x1b", "control character", false},
		{"nümpy", "non-ASCII", false},
		{"numpy;", "empty marker", false},
		{"numpy; os_name == 'posix' or", "missing its value", false},
		{"numpy; os_name == $HOME", "metacharacter '$'", false},
		{"numpy; os_name == 'posix';id", "metacharacter ';'", false},
		{"numpy; os_name == 'po/six'", "not allowed", false},
		{"numpy; os_nam == 'posix'", "not a marker variable", false},
		{"numpy; os_name = 'posix'", "not a marker operator", false},
		{"numpy; (os_name == 'posix'", "missing )", false},
		{"numpy; os_name == 'posix", "unterminated", false},
		{"numpy; os_name == 'posix' os_name", "unexpected", false},
		{"numpy; os_name not 'x'", "must be followed by", false},
		{"python>=3", "", false}, // accepted as a requirement; refused by Spec
	} {
		_, err := ParseRequirement(tt.in, tt.urls)
		if tt.says == "" {
			if err != nil {
				t.Errorf("ParseRequirement(%q): %v", tt.in, err)
			}
			continue
		}
		var re *RequirementError
		if !errors.Is(err, ErrBadRequirement) || !errors.As(err, &re) {
			t.Errorf("ParseRequirement(%q): err = %v, want a *RequirementError", tt.in, err)
			continue
		}
		if re.Input != tt.in || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ParseRequirement(%q): err = %v, want it to say %q", tt.in, err, tt.says)
		}
	}
}

func TestCondaString(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"numpy":                "numpy",
		"Python_ABI":           "python_abi",
		"numpy>=1.2,<2":        "numpy<2,>=1.2",
		"numpy==1.26.*":        "numpy==1.26.*",
		"ca-certificates~=1.0": "ca-certificates~=1.0",
	} {
		r, err := ParseRequirement(in, false)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.CondaString(); err != nil || got != want {
			t.Errorf("CondaString(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"requests[socks]", "tomli; python_version < '3.11'", "pkg @ https://x.example/p.whl", "pkg===1"} {
		r, err := ParseRequirement(in, true)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.CondaString(); !errors.Is(err, ErrBadRequirement) {
			t.Errorf("CondaString(%q) = %q, %v; want an error", in, got, err)
		}
	}
}

func TestNormalizeName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Django": "django", "ruamel.yaml": "ruamel-yaml", "a__b--c..d": "a-b-c-d", "Scikit_Learn": "scikit-learn",
		"_libgcc_mutex": "-libgcc-mutex", "x._": "x-",
	} {
		if got := NormalizeName(in); got != want {
			t.Errorf("NormalizeName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzParseRequirement checks the promises ParseRequirement makes about
// what it accepts, whatever the input.
func FuzzParseRequirement(f *testing.F) {
	for _, s := range []string{
		"numpy", "pandas>=2.1,<3", "requests[socks]", "tomli; python_version < '3.11'",
		"pkg @ https://example.com/p.whl ; os_name == 'posix'", "--index-url x", "a b", "x==1.*",
		"x; (os_name == 'a' or extra == 'b') and python_version >= '3'", "x===a.b", "x~=1.2",
		"numpy; os_name == 'posix' $(id)", "x[a,b]>=1", "x @ https://h/p#sha256=00",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, s string, allowURLs bool) {
		r, err := ParseRequirement(s, allowURLs)
		if err != nil {
			if !errors.Is(err, ErrBadRequirement) {
				t.Fatalf("error %v does not wrap ErrBadRequirement", err)
			}
			return
		}
		canon := r.String()
		for _, out := range []string{canon, strings.TrimSpace(s)} {
			if strings.HasPrefix(out, "-") {
				t.Fatalf("accepted %q, which starts with '-'", out)
			}
		}
		if r.URL != "" && !allowURLs {
			t.Fatalf("accepted a URL in %q without allowURLs", s)
		}
		// Outside the marker: no whitespace, no shell metacharacters; "!"
		// and "*" only as parts of "!=" and a trailing ".*".
		head, _, _ := strings.Cut(canon, ";")
		if r.URL != "" {
			head = strings.TrimSuffix(head, " ")
		}
		if strings.ContainsAny(head, " \t\n\r\x00|&$`(){}?'\"\\;") {
			t.Fatalf("canonical %q holds whitespace or a shell metacharacter outside its marker", canon)
		}
		if r.URL == "" {
			if strings.ContainsAny(head, "#@:/") {
				t.Fatalf("canonical %q holds URL characters but has no URL", canon)
			}
			for i := 0; i < len(head); i++ {
				if head[i] == '!' && (i+1 >= len(head) || head[i+1] != '=') {
					t.Fatalf("canonical %q holds a '!' outside '!='", canon)
				}
				if head[i] == '*' && (head[i-1] != '.' || (i+1 < len(head) && head[i+1] != ',')) {
					t.Fatalf("canonical %q holds a '*' outside a trailing '.*'", canon)
				}
			}
		}
		if strings.ContainsAny(r.Marker, "|&$`{}?;\\\n\x00") {
			t.Fatalf("marker %q holds a shell metacharacter", r.Marker)
		}
		// The canonical form parses back to the same value.
		again, err := ParseRequirement(canon, allowURLs)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", canon, s, err)
		}
		if again.String() != canon || again.NormName != r.NormName || again.Name != r.NormName ||
			!slices.Equal(again.Extras, r.Extras) || again.Specifier != r.Specifier ||
			again.Marker != r.Marker || again.URL != r.URL {
			t.Fatalf("canonical %q of %q re-parses to %+v, not %+v", canon, s, again, r)
		}
	})
}
