package coupon_test

import (
	"testing"

	"github.com/syncd/syncd/coupon"
)

func TestBindAsOf(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		found    bool
	}{
		{"last_purchase_at < :as_of - interval '180 days'", "last_purchase_at < $2::timestamptz - interval '180 days'", true},
		{":as_of", "$2::timestamptz", true},
		{"a < :as_of AND b > :as_of", "a < $2::timestamptz AND b > $2::timestamptz", true},
		{"(x<:as_of)", "(x<$2::timestamptz)", true},
		{"note = ':as_of'", "note = ':as_of'", false},
		{"note = 'it''s :as_of'", "note = 'it''s :as_of'", false},
		{`note = E'\' :as_of'`, `note = E'\' :as_of'`, false},
		{`":as_of" = 1`, `":as_of" = 1`, false},
		{"x = $$ :as_of $$", "x = $$ :as_of $$", false},
		{"x = $q$ :as_of $q$ AND y < :as_of", "x = $q$ :as_of $q$ AND y < $2::timestamptz", true},
		{"x < :as_of -- :as_of\n", "x < $2::timestamptz -- :as_of\n", true},
		{"x < /* :as_of */ 1", "x < /* :as_of */ 1", false},
		{"x::as_of", "x::as_of", false},
		{"x < :as_of_day", "x < :as_of_day", false},
		{"x = $1", "x = $1", false},
		{"", "", false},
	} {
		got, found := coupon.BindAsOf(tc.in, 2)
		if got != tc.want || found != tc.found {
			t.Errorf("BindAsOf(%q) = %q, %v; want %q, %v", tc.in, got, found, tc.want, tc.found)
		}
	}
}
