package statestore

import (
	"testing"
	"time"
)

// The hours of a tenant's result bytes still within the window are summed,
// and the sum says when it next falls; fields of other forms, of hours
// past, and values that are no count are left out.
func TestResultBytesSince(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 30, 0, 0, time.UTC)
	since := now.Add(-24 * time.Hour)
	hour := ResultHour(now)
	fields := map[string][]byte{
		ResultBytesField(hour, "w1"):                    []byte("100"),
		ResultBytesField(hour, "w2"):                    []byte("20"),
		ResultBytesField(hour.Add(-23*time.Hour), "w1"): []byte("3"),
		ResultBytesField(hour.Add(-24*time.Hour), "w1"): []byte("1000"), // 10:00 to 11:00 yesterday: ends within the window
		ResultBytesField(hour.Add(-25*time.Hour), "w1"): []byte("999"),  // ended at 10:00 yesterday: out
		"junk": []byte("999"),
		ResultBytesField(hour.Add(-time.Hour), "w3"):      []byte("x"),
		ResultBytesField(hour.Add(-2*time.Hour), "w:a:b"): []byte("7"),
	}
	sum, next := ResultBytesSince(fields, since)
	if sum != 1130 || !next.Equal(hour.Add(-23*time.Hour)) {
		t.Fatalf("sum %d next %s, want 1130 and %s", sum, next, hour.Add(-23*time.Hour))
	}
	if h, w, ok := ParseResultBytesField(ResultBytesField(hour, "w:a:b")); !ok || !h.Equal(hour) || w != "w:a:b" {
		t.Fatalf("parse: %s %q %v", h, w, ok)
	}
	if sum, next := ResultBytesSince(nil, since); sum != 0 || !next.IsZero() {
		t.Fatalf("no fields: %d %s", sum, next)
	}
}
