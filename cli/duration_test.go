package cli

import (
	"testing"
	"time"
)

func TestDurationText(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{350 * time.Millisecond, "350ms"},
		{999 * time.Millisecond, "999ms"},
		{time.Second, "1s"},
		{1250 * time.Millisecond, "1.2s"},
		{9999 * time.Millisecond, "9.9s"},
		{42*time.Second + 900*time.Millisecond, "42s"},
		{4*time.Minute + 5*time.Second + 300*time.Millisecond, "4m5s"},
		{time.Hour, "1h0m"},
		{2*time.Hour + 13*time.Minute + 59*time.Second, "2h13m"},
		{24*time.Hour + 5*time.Second, "24h0m"},
		{47*time.Hour + 59*time.Minute, "47h59m"},
		{48 * time.Hour, "2d0h"},
		{5*day + 3*time.Hour + 59*time.Minute, "5d3h"},
		{10 * day, "10d"},
		{7882*time.Hour + 59*time.Minute + 14086*time.Millisecond, "328d"},
		{-1500 * time.Millisecond, "-1.5s"},
	} {
		if got := durationText(tc.d); got != tc.want {
			t.Errorf("durationText(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}
