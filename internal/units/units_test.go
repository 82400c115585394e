package units

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want int64
	}{
		// What the byte flags of the command line have always read.
		{"0", 0},
		{"1048576", 1 << 20},
		{"512KiB", 512 << 10},
		{"1MiB", 1 << 20},
		{"2GiB", 2 << 30},
		{"1K", 1 << 10},
		{"1M", 1 << 20},
		{"1G", 1 << 30},
		{"7B", 7},
		{" 16 MiB ", 16 << 20},
		{"+5", 5},
		{"+1MiB", 1 << 20},
		{"-0", 0},
		// What the sizes of a limits set have always read.
		{"1048576B", 1 << 20},
		{"1 GiB", 1 << 30},
		{"512mib", 512 << 20},
		{"1g", 1 << 30},
		{"2k", 2 << 10},
		{"2b", 2},
		{"1GB", 1e9},
		{"2kb", 2000},
		{"1MB", 1e6},
		{"1TiB", 1 << 40},
		{"1t", 1 << 40},
		{"3tb", 3e12},
		// The edge of int64.
		{"9223372036854775807", math.MaxInt64},
		{"8388607TiB", 8388607 << 40},
	}
	for _, tc := range cases {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseSizeErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in, want string
	}{
		{"", "not a size"},
		{"   ", "not a size"},
		{"MiB", "not a size"},
		{"+", "not a size"},
		{"-", "not a size"},
		{"-1", "not a size: it is negative"},
		{"-1GiB", "not a size: it is negative"},
		{"1.5GiB", `unknown unit ".5GiB"`},
		{"1PiB", `unknown unit "PiB"`},
		{"1 MiB x", `unknown unit "MiB x"`},
		{"1e6", `unknown unit "e6"`},
		{"0x10", `unknown unit "x10"`},
		{"1_000", `unknown unit "_000"`},
		{"++1", "not a size"},
		{"9223372036854775808", "too large"},
		{"99999999999999999999", "too large"},
		{"8388608TiB", "too large"},
		{"9999999TiB", "too large"},
		{"-99999999999999999999", "negative"},
	}
	for _, tc := range cases {
		n, err := ParseSize(tc.in)
		if err == nil {
			t.Errorf("ParseSize(%q) = %d, want an error with %q", tc.in, n, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSize(%q): error %q lacks %q", tc.in, err, tc.want)
		}
	}
}

func TestScale(t *testing.T) {
	t.Parallel()
	cases := []struct {
		n, largest int64
		count      int64
		unit       string
	}{
		{0, TiB, 0, ""},
		{-1 << 20, TiB, -1 << 20, ""},
		{1, TiB, 1, ""},
		{1000, TiB, 1000, ""},
		{1 << 10, TiB, 1, "KiB"},
		{3 << 10, MiB, 3, "KiB"},
		{1 << 20, MiB, 1, "MiB"},
		{1536 << 20, TiB, 1536, "MiB"},
		{1 << 30, TiB, 1, "GiB"},
		{1 << 30, MiB, 1024, "MiB"},
		{2 << 40, TiB, 2, "TiB"},
		{2 << 40, GiB, 2048, "GiB"},
		{2 << 40, KiB, 2 << 30, "KiB"},
		{1e9 + 1, TiB, 1e9 + 1, ""},
	}
	for _, tc := range cases {
		if count, unit := Scale(tc.n, tc.largest); count != tc.count || unit != tc.unit {
			t.Errorf("Scale(%d, %d) = %d, %q; want %d, %q", tc.n, tc.largest, count, unit, tc.count, tc.unit)
		}
	}
	for _, tc := range []struct {
		n, largest int64
		want       string
	}{
		{0, MiB, "0"},
		{1 << 20, MiB, "1MiB"},
		{16 << 20, MiB, "16MiB"},
		{1 << 30, MiB, "1024MiB"},
		{1 << 30, TiB, "1GiB"},
		{512 << 10, MiB, "512KiB"},
		{1e6, TiB, "1000000"},
	} {
		if got := FormatSize(tc.n, tc.largest); got != tc.want {
			t.Errorf("FormatSize(%d, %d) = %q, want %q", tc.n, tc.largest, got, tc.want)
		}
	}
}

// FuzzParseSize: whatever ParseSize accepts is a size of zero or more that
// FormatSize writes in a form read back as the same size, and a plain
// number reads as itself.
func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "1048576", "512KiB", " 1 MiB ", "1M", "+5", "-0", "-1", "2gib", "1MB", "3tb",
		"1.5GiB", "1PiB", "9223372036854775807", "8388608TiB", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, err := ParseSize(in)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", in, n)
		}
		if plain, err := strconv.ParseInt(strings.TrimSpace(in), 10, 64); err == nil && plain != n {
			t.Fatalf("ParseSize(%q) = %d, want %d", in, n, plain)
		}
		for _, largest := range []int64{KiB, MiB, GiB, TiB} {
			out := FormatSize(n, largest)
			if back, err := ParseSize(out); err != nil || back != n {
				t.Fatalf("ParseSize(%q) = %d; FormatSize(%d, %d) = %q reads back as %d, %v", in, n, n, largest, out, back, err)
			}
		}
	})
}
