package cli

import (
	"fmt"
	"time"
)

const day = 24 * time.Hour

// durationText renders d for people, in at most two units, the smaller one
// truncated: 350ms, 1.2s, 42s, 4m5s, 2h13m (up to 48h), 5d3h (up to 10
// days), then whole days: 328d. The text output uses it; JSON keeps seconds.
func durationText(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + durationText(-d)
	case d == 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d < 10*time.Second:
		if tenths := d % time.Second / (100 * time.Millisecond); tenths > 0 {
			return fmt.Sprintf("%d.%ds", d/time.Second, tenths)
		}
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Minute:
		return fmt.Sprintf("%ds", d/time.Second)
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", d/time.Minute, d%time.Minute/time.Second)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	case d < 10*day:
		return fmt.Sprintf("%dd%dh", d/day, d%day/time.Hour)
	}
	return fmt.Sprintf("%dd", d/day)
}

// secondsDuration is a number of seconds as a duration, to the millisecond.
func secondsDuration(sec float64) time.Duration {
	return time.Duration(sec*1000) * time.Millisecond
}
