package envspec

import "testing"

func TestEvalMarker(t *testing.T) {
	env := MarkerEnv{"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
		"platform_machine": "x86_64", "implementation_name": "cpython", "os_name": "posix"}
	for _, tt := range []struct {
		marker string
		want   bool
	}{
		{`extra == "x"`, false},
		{`extra != "x"`, true},
		{`python_version < "3.9"`, false},
		{`python_version >= "3.9"`, true},
		{`python_version > "3.9"`, true}, // 3.12 > 3.9 as versions, not as strings
		{`python_full_version == "3.12.*"`, true},
		{`python_full_version != "3.12.*"`, false},
		{`python_full_version ~= "3.12.0"`, true},
		{`python_full_version ~= "3.11.0"`, false},
		{`python_full_version < "3.12.3rc1"`, false},
		{`python_full_version > "3.12.3rc1"`, true},
		{`sys_platform == "win32" or os_name == "posix"`, true},
		{`(sys_platform == "linux" and platform_machine == "aarch64") or extra == "x"`, false},
		{`"linux" in sys_platform`, true},
		{`"win" not in sys_platform`, true},
		{`implementation_name === "cpython"`, true},
	} {
		got, err := EvalMarker(tt.marker, env)
		if err != nil || got != tt.want {
			t.Errorf("EvalMarker(%s) = %v, %v; want %v", tt.marker, got, err, tt.want)
		}
	}
	if _, err := EvalMarker(`sys_platform ~= "linux"`, env); err == nil {
		t.Error("~= of two strings: no error")
	}
}
