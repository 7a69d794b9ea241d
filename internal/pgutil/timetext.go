package pgutil

import "time"

// ParseTime parses PostgreSQL's ISO text output of a timestamp (with or
// without time zone; without one it is taken as UTC) or a date.
func ParseTime(s string) (time.Time, bool) {
	for _, layout := range []string{
		"2006-01-02 15:04:05.999999-07",
		"2006-01-02 15:04:05.999999-07:00",
		"2006-01-02 15:04:05.999999-07:00:00",
		"2006-01-02 15:04:05.999999",
		"2006-01-02",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), true
		}
	}
	return time.Time{}, false
}
