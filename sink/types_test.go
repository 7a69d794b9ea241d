package sink

import "testing"

func TestSameType(t *testing.T) {
	for _, c := range []struct {
		src, dst string
		want     bool
	}{
		{"bigint", "bigint", true},
		{"numeric(12,2)", "numeric", true},
		{"character varying(40)", "text", true},
		{"timestamp(3) with time zone", "timestamp with time zone", true},
		{"integer[]", "integer[]", true},
		{"text", "integer", false},
		{"timestamp with time zone", "timestamp without time zone", false},
		{"bigint", "integer", false},
		{"jsonb", "json", false},
	} {
		if got := sameType(c.src, c.dst); got != c.want {
			t.Errorf("sameType(%q, %q) = %v, want %v", c.src, c.dst, got, c.want)
		}
	}
}
