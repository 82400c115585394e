package telemetry

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
)

// maxLabelValues bounds the distinct values of a label whose values come
// from codexec's own vocabulary (kinds, statuses, limits, stages): a peer
// speaking a newer protocol cannot grow the series without bound either.
const maxLabelValues = 32

// MaxTenants is how many distinct tenants get series of their own; the
// jobs of any further tenant count under "other".
const MaxTenants = 100

// Other is the label value that stands for every value past a label's cap.
const Other = "other"

// fold keeps the first max distinct values of a label and maps every
// later one to Other.
type fold struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
}

func newFold(max int) *fold { return &fold{max: max, seen: make(map[string]struct{})} }

// value is v while v is one of the first max values seen, else Other.
func (f *fold) value(v string) string {
	v = clean(v)
	f.mu.RLock()
	_, ok := f.seen[v]
	full := len(f.seen) >= f.max
	f.mu.RUnlock()
	if ok {
		return v
	}
	if full {
		return Other
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.seen[v]; ok {
		return v
	}
	if len(f.seen) >= f.max {
		return Other
	}
	f.seen[v] = struct{}{}
	return v
}

// maxLabelBytes bounds one label value.
const maxLabelBytes = 64

// clean makes v a valid label value: UTF-8 (the client refuses anything
// else) of at most maxLabelBytes bytes.
//
// A value that had to be changed gets a digest of the original appended, so
// that it stays apart from every other: cut to its first 64 bytes, a tenant
// name was the label of every tenant whose name began with those bytes, and
// the tenant named by them alone read all their series
// (MetricsHandlerForTenant).
func clean(v string) string {
	c := strings.ToValidUTF8(v, "?")
	if c == v && len(c) <= maxLabelBytes {
		return c
	}
	sum := sha256.Sum256([]byte(v))
	suffix := "~" + hex.EncodeToString(sum[:6])
	if len(c) > maxLabelBytes-len(suffix) {
		c = strings.ToValidUTF8(c[:maxLabelBytes-len(suffix)], "")
	}
	return c + suffix
}
