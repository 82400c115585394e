package limits

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/codexec/codexec/wire"
)

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Set
	}{
		{"", Set{}},
		{"none", Set{}},
		{" NONE ", Set{}},
		{"memory=1GiB,cpu=60s,procs=256,fsize=1GiB,disk=2GiB,nofile=1024",
			Set{Memory: 1 << 30, CPU: time.Minute, Procs: 256, FileSize: 1 << 30, Disk: 2 << 30, OpenFiles: 1024}},
		{"nofile=10, memory = 512mib ,", Set{Memory: 512 << 20, OpenFiles: 10}},
		{"memory=1048576", Set{Memory: 1 << 20}},
		{"memory=1048576B", Set{Memory: 1 << 20}},
		{"memory=1 GiB", Set{Memory: 1 << 30}},
		{"memory=1g", Set{Memory: 1 << 30}},
		{"memory=1GB", Set{Memory: 1e9}},
		{"memory=2kb", Set{Memory: 2000}},
		{"memory=2K", Set{Memory: 2048}},
		{"disk=1TiB", Set{Disk: 1 << 40}},
		{"disk=3tb", Set{Disk: 3e12}},
		{"cpu=90", Set{CPU: 90 * time.Second}},
		{"cpu=5m", Set{CPU: 5 * time.Minute}},
		{"cpu=1h30m", Set{CPU: 90 * time.Minute}},
		{"cpu=500ms", Set{CPU: 500 * time.Millisecond}},
		{"MEMORY=1MiB", Set{Memory: 1 << 20}},
		{"memory=none,procs=3", Set{Procs: 3}},
	}
	for _, tc := range cases {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want []string // substrings of the error
	}{
		{"mem=1GiB", []string{`unknown limit "mem"`, "memory, cpu, procs, fsize, disk, nofile"}},
		{"memory", []string{`"memory" is not key=value`}},
		{"memory=", []string{"memory has no value", "memory=none"}},
		{"memory=0", []string{"memory=0", "more than zero", "memory=none"}},
		{"procs=-1", []string{"procs=-1", "more than zero"}},
		{"procs=1.5", []string{"procs=1.5", "whole number"}},
		{"memory=-1GiB", []string{"memory=-1GiB", "not a size"}},
		{"memory=1.5GiB", []string{"memory=1.5GiB", "unknown unit"}},
		{"memory=1PiB", []string{`unknown unit "PiB"`}},
		{"memory=9999999TiB", []string{"too large"}},
		{"memory=99999999999999999999", []string{"too large"}},
		{"cpu=0s", []string{"cpu=0s", "more than zero"}},
		{"cpu=-5s", []string{"more than zero"}},
		{"cpu=5 minutes", []string{"not a duration", "10m"}},
		{"cpu=1.5", []string{"not a duration"}},
		{"cpu=99999999999999", []string{"too large"}},
		{"procs=1,procs=2", []string{"procs is given twice"}},
		{"nofile=x,disk=y", []string{"nofile=x", "disk=y"}},
	}
	for _, tc := range cases {
		_, err := Parse(tc.in)
		if err == nil {
			t.Errorf("Parse(%q) accepted", tc.in)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Parse(%q): error %q lacks %q", tc.in, err, w)
			}
		}
	}
}

func TestParseOver(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Set
	}{
		{"", Default},
		{"none", Set{}},
		{"memory=2GiB", func() Set { s := Default; s.Memory = 2 << 30; return s }()},
		{"disk=none,cpu=1m", func() Set { s := Default; s.Disk, s.CPU = 0, time.Minute; return s }()},
		{Default.String(), Default},
	}
	for _, tc := range cases {
		got, err := ParseOver(Default, tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseOver(Default, %q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if _, err := ParseOver(Default, "memory=lots"); err == nil {
		t.Error("ParseOver accepted a bad value")
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   Set
		want string
	}{
		{Set{}, "none"},
		{Default, "memory=1GiB,cpu=10m,procs=256,fsize=1GiB,disk=2GiB,nofile=1024"},
		{DefaultMax, "memory=8GiB,cpu=1h,procs=4096,fsize=16GiB,disk=32GiB,nofile=65536"},
		{Set{Memory: 1536 << 20, CPU: 90 * time.Second}, "memory=1536MiB,cpu=90s,procs=none,fsize=none,disk=none,nofile=none"},
		{Set{Memory: 1e9 + 1, CPU: 1500 * time.Millisecond, Disk: 3 << 10}, "memory=1000000001,cpu=1.5s,procs=none,fsize=none,disk=3KiB,nofile=none"},
		{Set{FileSize: 2 << 40}, "memory=none,cpu=none,procs=none,fsize=2TiB,disk=none,nofile=none"},
	}
	for _, tc := range cases {
		if got := tc.in.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.in, got, tc.want)
		}
		// The canonical form reads back, alone or over any base.
		for _, base := range []Set{{}, Default, DefaultMax} {
			if back, err := ParseOver(base, tc.in.String()); err != nil || back != tc.in {
				t.Errorf("ParseOver(%+v, %q) = %+v, %v", base, tc.in.String(), back, err)
			}
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	if err := Default.Check(DefaultMax); err != nil {
		t.Errorf("Default.Check(DefaultMax): %v", err)
	}
	if err := DefaultMax.Check(DefaultMax); err != nil {
		t.Errorf("equal to max: %v", err)
	}
	if err := (Set{}).Check(Set{}); err != nil {
		t.Errorf("no limits, no maximum: %v", err)
	}
	if err := Default.Check(Set{}); err != nil {
		t.Errorf("no maximum: %v", err)
	}
	over := Default
	over.Memory, over.CPU = 9<<30, 2*time.Hour
	err := over.Check(DefaultMax)
	for _, w := range []string{"default memory=9GiB is above the maximum memory=8GiB", "default cpu=2h is above the maximum cpu=1h"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Check: %v, want %q", err, w)
		}
	}
	if err != nil && strings.Contains(err.Error(), "procs") {
		t.Errorf("Check names a key within its maximum: %v", err)
	}
	unlimited := Default
	unlimited.Disk = 0
	if err := unlimited.Check(DefaultMax); err == nil || !strings.Contains(err.Error(), "default disk=none") {
		t.Errorf("unlimited default under a maximum: %v", err)
	}
}

func TestResolve(t *testing.T) {
	t.Parallel()
	max := DefaultMax
	cases := []struct {
		name     string
		defaults Set
		req      *wire.Limits
		want     Set
	}{
		{"nil request", Default, nil, Default},
		{"empty request", Default, &wire.Limits{}, Default},
		{"every field", Default,
			&wire.Limits{MemoryMB: 2048, CPUSeconds: 30, Processes: 10, FileSizeMB: 5, DiskMB: 100, OpenFiles: 64},
			Set{Memory: 2 << 30, CPU: 30 * time.Second, Procs: 10, FileSize: 5 << 20, Disk: 100 << 20, OpenFiles: 64}},
		{"one field", Default, &wire.Limits{Processes: 4096},
			func() Set { s := Default; s.Procs = 4096; return s }()},
		{"defaults capped", Set{Memory: 16 << 30}, nil,
			Set{Memory: 8 << 30, CPU: time.Hour, Procs: 4096, FileSize: 16 << 30, Disk: 32 << 30, OpenFiles: 65536}},
	}
	for _, tc := range cases {
		got, err := Resolve(tc.defaults, max, tc.req)
		if err != nil || got != tc.want {
			t.Errorf("%s: Resolve = %+v, %v; want %+v", tc.name, got, err, tc.want)
		}
	}
	// No maximum: anything representable goes.
	got, err := Resolve(Set{}, Set{}, &wire.Limits{MemoryMB: 1 << 30})
	if err != nil || got != (Set{Memory: 1 << 50}) {
		t.Errorf("unbounded: %+v, %v", got, err)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		req  wire.Limits
		max  Set
		want string
	}{
		{wire.Limits{MemoryMB: 9000}, DefaultMax, "memory_mb 9000 is above this pool's maximum of 8192"},
		{wire.Limits{CPUSeconds: 3601}, DefaultMax, "cpu_seconds 3601 is above this pool's maximum of 3600"},
		{wire.Limits{Processes: 5000}, DefaultMax, "processes 5000 is above this pool's maximum of 4096"},
		{wire.Limits{FileSizeMB: 16385}, DefaultMax, "file_size_mb 16385 is above this pool's maximum of 16384"},
		{wire.Limits{DiskMB: 40000}, DefaultMax, "disk_mb 40000 is above this pool's maximum of 32768"},
		{wire.Limits{OpenFiles: 65537}, DefaultMax, "open_files 65537 is above this pool's maximum of 65536"},
		{wire.Limits{OpenFiles: -1}, DefaultMax, "open_files must be a positive whole number, not -1"},
		{wire.Limits{MemoryMB: 1 << 60}, Set{}, "memory_mb 1152921504606846976 is too large"},
		{wire.Limits{CPUSeconds: 1 << 40}, Set{}, "cpu_seconds 1099511627776 is too large"},
	}
	for _, tc := range cases {
		_, err := Resolve(Default, tc.max, &tc.req)
		var re *RequestError
		if !errors.As(err, &re) || err.Error() != tc.want {
			t.Errorf("Resolve(%+v) = %v, want %q", tc.req, err, tc.want)
		}
	}
	// At the maximum exactly is allowed.
	if _, err := Resolve(Default, DefaultMax, &wire.Limits{MemoryMB: 8192, CPUSeconds: 3600, OpenFiles: 65536}); err != nil {
		t.Errorf("at the maximum: %v", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "none", Default.String(), DefaultMax.String(), "memory=1g,cpu=90", "cpu=1.5s,disk=3kb", "nofile=none"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			return
		}
		for _, f := range fields {
			if *f.get(&s) < 0 {
				t.Fatalf("Parse(%q) = %+v: negative %s", in, s, f.key)
			}
		}
		out := s.String()
		back, err := Parse(out)
		if err != nil || back != s {
			t.Fatalf("Parse(%q) = %+v; String %q reads back as %+v, %v", in, s, out, back, err)
		}
		if again := back.String(); again != out {
			t.Fatalf("String not canonical: %q then %q", out, again)
		}
	})
}
