package limits

import (
	"fmt"
	"math"
	"time"

	"github.com/codexec/codexec/wire"
)

// RequestError is a per-call limit (wire.Limits) that a worker refuses. It
// names the parameter in the client's units, so its message can go back to
// the client as it is.
type RequestError struct {
	// Param is the wire parameter, e.g. "memory_mb".
	Param string
	// Value is what the call asked for.
	Value int64
	// Max is the pool's maximum in the parameter's units, or 0 when Value is
	// refused for another reason (not positive, or too large to represent).
	Max int64
}

func (e *RequestError) Error() string {
	switch {
	case e.Value <= 0:
		return fmt.Sprintf("%s must be a positive whole number, not %d", e.Param, e.Value)
	case e.Max > 0:
		return fmt.Sprintf("%s %d is above this pool's maximum of %d", e.Param, e.Value, e.Max)
	}
	return fmt.Sprintf("%s %d is too large", e.Param, e.Value)
}

// request maps one wire.Limits parameter onto a Set field.
type request struct {
	param string
	value func(*wire.Limits) int64
	field func(*Set) *int64
	unit  int64 // bytes (or nanoseconds) per unit of the parameter
}

var requests = []request{
	{"memory_mb", func(l *wire.Limits) int64 { return l.MemoryMB }, func(s *Set) *int64 { return &s.Memory }, 1 << 20},
	{"cpu_seconds", func(l *wire.Limits) int64 { return l.CPUSeconds }, func(s *Set) *int64 { return (*int64)(&s.CPU) }, int64(time.Second)},
	{"processes", func(l *wire.Limits) int64 { return l.Processes }, func(s *Set) *int64 { return &s.Procs }, 1},
	{"file_size_mb", func(l *wire.Limits) int64 { return l.FileSizeMB }, func(s *Set) *int64 { return &s.FileSize }, 1 << 20},
	{"disk_mb", func(l *wire.Limits) int64 { return l.DiskMB }, func(s *Set) *int64 { return &s.Disk }, 1 << 20},
	{"open_files", func(l *wire.Limits) int64 { return l.OpenFiles }, func(s *Set) *int64 { return &s.OpenFiles }, 1},
}

// Resolve returns the limits of one job: defaults, with each field req sets
// (> 0) in its place. A requested value above max's is refused with a
// *RequestError naming the parameter, the value and the maximum in the
// parameter's units ("memory_mb 9000 is above this pool's maximum of
// 8192"), as is a negative one; a zero field of max is no maximum. Defaults
// are capped to max (Check refuses such defaults at start-up). A nil req is
// the defaults.
func Resolve(defaults, max Set, req *wire.Limits) (Set, error) {
	out := defaults
	for _, r := range requests {
		if m := *r.field(&max); m > 0 {
			if v := r.field(&out); *v <= 0 || *v > m {
				*v = m
			}
		}
	}
	if req == nil {
		return out, nil
	}
	for _, r := range requests {
		v := r.value(req)
		switch {
		case v == 0:
			continue
		case v < 0:
			return Set{}, &RequestError{Param: r.param, Value: v}
		}
		m := *r.field(&max)
		if m > 0 && v > m/r.unit {
			return Set{}, &RequestError{Param: r.param, Value: v, Max: m / r.unit}
		}
		if v > math.MaxInt64/r.unit {
			return Set{}, &RequestError{Param: r.param, Value: v}
		}
		*r.field(&out) = v * r.unit
	}
	return out, nil
}
