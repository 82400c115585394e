// Package units reads and writes sizes in bytes, the one parser of every
// size an operator writes: the byte flags of the command line (--max-code,
// --output-limit, ...) and the sizes of a limits set (--limits memory=1GiB).
// It imports nothing of codexec's.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Binary units, in bytes.
const (
	KiB int64 = 1 << 10
	MiB int64 = 1 << 20
	GiB int64 = 1 << 30
	TiB int64 = 1 << 40
)

// suffixes are the units ParseSize reads, lower case (matching ignores
// case). Bare letters are binary ("1M" is 1 MiB), as the command line has
// always read them; "KB", "MB", "GB" and "TB" are decimal.
var suffixes = map[string]int64{
	"": 1, "b": 1,
	"k": KiB, "kib": KiB, "kb": 1e3,
	"m": MiB, "mib": MiB, "mb": 1e6,
	"g": GiB, "gib": GiB, "gb": 1e9,
	"t": TiB, "tib": TiB, "tb": 1e12,
}

// binary are the units Scale writes, largest first.
var binary = []struct {
	name string
	size int64
}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}

var errNotASize = errors.New("not a size")

// ParseSize reads a size in bytes: a whole number, optionally signed, then
// optionally a unit of suffixes, in any case, with or without a space
// ("1048576", "512KiB", "1 MiB", "1M", "2gib", "1MB", "3tb"). Spaces around
// it are ignored. A negative size, a fraction, an unknown unit and a size
// that does not fit in an int64 are errors; 0 is a size (what it means is
// the caller's business).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := i
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	if i == digits {
		return 0, errNotASize
	}
	unit := strings.TrimSpace(s[i:])
	mult, ok := suffixes[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("unknown unit %q", unit)
	}
	if s[0] == '-' && strings.Trim(s[digits:i], "0") != "" {
		return 0, fmt.Errorf("%w: it is negative", errNotASize)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
}

// Scale writes n as a count of the largest binary unit, up to largest
// (KiB, MiB, GiB or TiB), that divides it exactly: Scale(3<<20, GiB) is
// (3, "MiB"). A size no such unit divides, and one not above zero, is
// (n, ""): a count of bytes.
func Scale(n, largest int64) (int64, string) {
	if n > 0 {
		for _, u := range binary {
			if u.size <= largest && n%u.size == 0 {
				return n / u.size, u.name
			}
		}
	}
	return n, ""
}

// FormatSize writes n as Scale does, the count followed by the unit with no
// space ("512KiB", "1GiB", "1000000"), a form ParseSize reads back.
func FormatSize(n, largest int64) string {
	count, unit := Scale(n, largest)
	return strconv.FormatInt(count, 10) + unit
}
