package statestore

import (
	"strconv"
	"strings"
	"time"
)

// ResultHour is the hour (its start, UTC) under which a result stored at t
// is counted in a tenant's result bytes (Keys.TenantResultBytes).
func ResultHour(t time.Time) time.Time { return t.UTC().Truncate(time.Hour) }

// ResultBytesField is the field of worker's results of hour.
func ResultBytesField(hour time.Time, worker string) string {
	return strconv.FormatInt(hour.Unix(), 10) + ":" + worker
}

// ParseResultBytesField returns the hour and the worker of a field of a
// tenant's result bytes; ok is false for a field of another form.
func ParseResultBytesField(field string) (hour time.Time, worker string, ok bool) {
	h, w, found := strings.Cut(field, ":")
	sec, err := strconv.ParseInt(h, 10, 64)
	if !found || err != nil {
		return time.Time{}, "", false
	}
	return time.Unix(sec, 0).UTC(), w, true
}

// ResultBytesSince sums the fields of a tenant's result bytes (HGetAll of
// Keys.TenantResultBytes) whose hour ends after since, and returns the
// earliest of those hours' ends (zero when none counts): when the sum
// next falls.
func ResultBytesSince(fields map[string][]byte, since time.Time) (sum int64, next time.Time) {
	for f, v := range fields {
		hour, _, ok := ParseResultBytesField(f)
		end := hour.Add(time.Hour)
		if !ok || !end.After(since) {
			continue
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n <= 0 {
			continue
		}
		sum += n
		if next.IsZero() || end.Before(next) {
			next = end
		}
	}
	return sum, next
}
