package cli

import (
	"testing"
	"time"
)

// FuzzParsePGTime: no text makes it panic; a parsed time is UTC and, written
// back the way PostgreSQL prints a timestamptz in UTC, parses to itself.
func FuzzParsePGTime(f *testing.F) {
	for _, s := range []string{
		"2026-10-01 09:00:00.000097+00", "2026-10-01 09:00:00+05:30", "2026-10-01 09:00:00.5-03:00:12",
		"2026-10-01 09:00:00.123456", "2026-10-01", "0001-01-01 00:00:00+00", "9999-12-31 23:59:59.999999+00",
		"infinity", "2026-02-30", "", "2026-10-01 09:00:00.1234567+00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, ok := ParsePGTime(s)
		if !ok {
			return
		}
		if tm.Location() != time.UTC {
			t.Fatalf("ParsePGTime(%q) = %v, not in UTC", s, tm)
		}
		// PostgreSQL prints years 1 to 9999 (BC aside) and at most microseconds.
		if tm.Year() < 1 || tm.Year() > 9999 || tm.Nanosecond()%1000 != 0 {
			return
		}
		back, ok := ParsePGTime(tm.Format("2006-01-02 15:04:05.999999-07"))
		if !ok || !back.Equal(tm) {
			t.Fatalf("ParsePGTime(%q) = %v; written back it parses to %v, %v", s, tm, back, ok)
		}
	})
}
