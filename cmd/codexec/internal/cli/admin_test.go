package cli

import (
	"testing"
	"time"
)

// --since and --until are days in UTC, defaulting to the last 30 days;
// a malformed day or an empty range is refused.
func TestAuditDays(t *testing.T) {
	now := time.Date(2026, 12, 3, 15, 4, 5, 0, time.UTC)
	first, last, err := auditDays("", "", now)
	if err != nil || first != time.Date(2026, 11, 3, 0, 0, 0, 0, time.UTC) || last != time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC) {
		t.Fatalf("defaults: %v %v %v", first, last, err)
	}
	first, last, err = auditDays("2026-12-01", "2026-12-02", now)
	if err != nil || !first.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !last.Equal(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("given: %v %v %v", first, last, err)
	}
	for _, bad := range [][2]string{{"12/01/2026", ""}, {"", "yesterday"}, {"2026-12-03", "2026-12-01"}} {
		if _, _, err := auditDays(bad[0], bad[1], now); err == nil {
			t.Errorf("--since %q --until %q accepted", bad[0], bad[1])
		}
	}
}
