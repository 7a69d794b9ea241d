package source

import "testing"

// A partial index counts for a source.where that PostgreSQL prints as its
// predicate, whatever the case, spaces, parentheses and casts.
func TestSamePredicate(t *testing.T) {
	for _, tc := range []struct {
		pred, where string
		want        bool
	}{
		{"(deleted_at IS NULL)", "deleted_at is null", true},
		{"((status)::text = 'active'::text)", "status = 'active'", true},
		{"(tenant_id = 42)", " tenant_id=42 ", true},
		{"((kind = 'a'::text) AND (n > 0))", "kind = 'a' AND n > 0", true},
		{"(created_at > '2026-01-01 00:00:00+00'::timestamp with time zone)", "created_at > '2026-01-01 00:00:00+00'", true},
		{"(deleted_at IS NULL)", "", false},
		{"(tenant_id = 42)", "tenant_id = 43", false},
		{"(deleted_at IS NULL)", "deleted_at IS NULL AND tenant_id = 1", false},
	} {
		if got := samePredicate(tc.pred, tc.where); got != tc.want {
			t.Errorf("samePredicate(%q, %q) = %v, want %v", tc.pred, tc.where, got, tc.want)
		}
	}
}
