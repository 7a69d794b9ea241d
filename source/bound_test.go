package source

import (
	"testing"
	"time"
)

func TestLimitText(t *testing.T) {
	at := time.Date(2026, 3, 1, 23, 59, 59, 987654_321, time.FixedZone("x", 9*3600)) // 14:59:59.987654321 UTC
	for _, tc := range []struct {
		typ  string
		want string
	}{
		{"timestamp with time zone", "2026-03-01 14:59:59.987654+00"},
		{"timestamp without time zone", "2026-03-01 14:59:59.987654"},
		// A timestamp(p) rounds a stamp to p digits, possibly down: the
		// limit is truncated so such a row still sorts at or after it.
		{"timestamp(0) with time zone", "2026-03-01 14:59:59+00"},
		{"timestamp(3) without time zone", "2026-03-01 14:59:59.987"},
		{"date", "2026-03-01"},
	} {
		_, got := limitText(tc.typ, at)
		if got != tc.want {
			t.Errorf("limitText(%q) = %q, want %q", tc.typ, got, tc.want)
		}
	}
}

func TestBaseTypeWithModifierInside(t *testing.T) {
	for typ, want := range map[string]string{
		"timestamp(3) with time zone":    "timestamp with time zone",
		"timestamp(0) without time zone": "timestamp without time zone",
		"numeric(12,2)":                  "numeric",
		"character varying(20)":          "character varying",
		"bigint":                         "bigint",
	} {
		if got := baseType(typ); got != want {
			t.Errorf("baseType(%q) = %q, want %q", typ, got, want)
		}
	}
}
