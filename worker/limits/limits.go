package limits

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/codexec/codexec/internal/units"
)

// Set is a set of per-job limits; a zero field means no limit.
type Set struct {
	// Memory is in bytes: all processes of the job together (cgroup), or
	// per process address space (the RLIMIT_AS fallback).
	Memory int64
	// CPU is the CPU time of each process (RLIMIT_CPU), in whole seconds
	// once applied (rounded up).
	CPU time.Duration
	// Procs counts processes and threads.
	Procs int64
	// FileSize is in bytes: the largest file a job may write (RLIMIT_FSIZE).
	FileSize int64
	// Disk is in bytes: what the job may use in the session's working
	// directory.
	Disk int64
	// OpenFiles counts descriptors per process (RLIMIT_NOFILE).
	OpenFiles int64
}

// Default is the worker's default for every job that asks for nothing else.
var Default = Set{Memory: 1 << 30, CPU: 10 * time.Minute, Procs: 256, FileSize: 1 << 30, Disk: 2 << 30, OpenFiles: 1024}

// DefaultMax is the most a job may ask for, unless the operator says
// otherwise.
var DefaultMax = Set{Memory: 8 << 30, CPU: time.Hour, Procs: 4096, FileSize: 16 << 30, Disk: 32 << 30, OpenFiles: 65536}

// Keys of the textual form, in the order String writes them.
const (
	KeyMemory    = "memory"
	KeyCPU       = "cpu"
	KeyProcs     = "procs"
	KeyFileSize  = "fsize"
	KeyDisk      = "disk"
	KeyOpenFiles = "nofile"
)

// none is the value that removes a limit, and, alone, all of them.
const none = "none"

type kind int

const (
	kindSize kind = iota
	kindCount
	kindDuration
)

// field describes one key of a Set; every loop over the keys goes through
// fields, so adding a limit is one line here.
type field struct {
	key  string
	kind kind
	// get and set read and write the field as int64 (nanoseconds for CPU).
	get func(*Set) *int64
}

var fields = []field{
	{KeyMemory, kindSize, func(s *Set) *int64 { return &s.Memory }},
	{KeyCPU, kindDuration, func(s *Set) *int64 { return (*int64)(&s.CPU) }},
	{KeyProcs, kindCount, func(s *Set) *int64 { return &s.Procs }},
	{KeyFileSize, kindSize, func(s *Set) *int64 { return &s.FileSize }},
	{KeyDisk, kindSize, func(s *Set) *int64 { return &s.Disk }},
	{KeyOpenFiles, kindCount, func(s *Set) *int64 { return &s.OpenFiles }},
}

func validKeys() string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return strings.Join(keys, ", ")
}

// IsZero reports whether s has no limit at all.
func (s Set) IsZero() bool { return s == Set{} }

// Parse reads a Set written as "memory=1GiB,cpu=60s,procs=256,fsize=1GiB,
// disk=2GiB,nofile=1024" (see the package documentation). Keys may come in
// any order; a missing key, or "key=none", is no limit. "" and "none" are
// the zero Set.
func Parse(s string) (Set, error) { return ParseOver(Set{}, s) }

// ParseOver reads s like Parse, on top of base: keys present in s replace
// base's values ("key=none" removes the limit), the others keep them. ""
// leaves base as it is; "none" alone removes every limit.
func ParseOver(base Set, s string) (Set, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, none) {
		return Set{}, nil
	}
	out := base
	seen := make(map[string]bool, len(fields))
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		key, val = strings.ToLower(strings.TrimSpace(key)), strings.TrimSpace(val)
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not key=value (keys: %s)", item, validKeys()))
			continue
		}
		f, found := lookup(key)
		if !found {
			errs = append(errs, fmt.Errorf("unknown limit %q (keys: %s)", key, validKeys()))
			continue
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("%s is given twice", key))
			continue
		}
		seen[key] = true
		v, err := f.parse(val)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		*f.get(&out) = v
	}
	if err := errors.Join(errs...); err != nil {
		return Set{}, err
	}
	return out, nil
}

func lookup(key string) (field, bool) {
	for _, f := range fields {
		if f.key == key {
			return f, true
		}
	}
	return field{}, false
}

// parse reads one value; 0 is "none".
func (f field) parse(val string) (int64, error) {
	if strings.EqualFold(val, none) {
		return 0, nil
	}
	if val == "" {
		return 0, fmt.Errorf("%s has no value (write %s=none for no limit)", f.key, f.key)
	}
	var (
		n   int64
		err error
	)
	switch f.kind {
	case kindSize:
		n, err = units.ParseSize(val)
	case kindCount:
		n, err = strconv.ParseInt(val, 10, 64)
		if err != nil {
			err = errors.New("not a whole number")
		}
	case kindDuration:
		n, err = parseDuration(val)
	}
	if err != nil {
		return 0, fmt.Errorf("%s=%s: %w (%s)", f.key, val, err, f.hint())
	}
	if n <= 0 {
		return 0, fmt.Errorf("%s=%s: must be more than zero (omit the key, or write %s=none, for no limit)", f.key, val, f.key)
	}
	return n, nil
}

func (f field) hint() string {
	switch f.kind {
	case kindSize:
		return "use bytes or a unit, e.g. 1073741824, 512MiB, 1GiB"
	case kindDuration:
		return "use seconds or a duration, e.g. 90, 90s, 10m"
	}
	return "use a whole number, e.g. 256"
}

func parseDuration(s string) (int64, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n > int64(math.MaxInt64/time.Second) {
			return 0, errors.New("too large")
		}
		return n * int64(time.Second), nil
	}
	if !strings.ContainsAny(s, "hmsuµn") {
		return 0, errors.New("not a duration")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, errors.New("not a duration")
	}
	return int64(d), nil
}

// String writes s in the canonical form Parse reads back: every key in a
// fixed order, "none" for no limit, sizes in the largest binary unit that
// divides them; the zero Set is "none". ParseOver(any, s.String()) == s.
func (s Set) String() string {
	if s.IsZero() {
		return none
	}
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f.key)
		b.WriteByte('=')
		b.WriteString(f.format(*f.get(&s)))
	}
	return b.String()
}

// format writes one value as String does.
func (f field) format(v int64) string {
	if v <= 0 {
		return none
	}
	switch f.kind {
	case kindSize:
		return units.FormatSize(v, units.TiB)
	case kindDuration:
		return formatDuration(time.Duration(v))
	}
	return strconv.FormatInt(v, 10)
}

func formatDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}

// Check reports, by key, each limit of s (the defaults) that max does not
// allow: a value above max's, or no limit where max has one. A zero field
// of max allows anything. It is the start-up check of a worker's
// configuration.
func (s Set) Check(max Set) error {
	var errs []error
	for _, f := range fields {
		v, m := *f.get(&s), *f.get(&max)
		switch {
		case m <= 0:
		case v <= 0:
			errs = append(errs, fmt.Errorf("default %s=none (no limit) is above the maximum %s=%s: give it a value, or make the maximum %s=none too",
				f.key, f.key, f.format(m), f.key))
		case v > m:
			errs = append(errs, fmt.Errorf("default %s=%s is above the maximum %s=%s", f.key, f.format(v), f.key, f.format(m)))
		}
	}
	return errors.Join(errs...)
}
