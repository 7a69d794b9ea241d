package config

import (
	"time"

	"github.com/robfig/cron/v3"
)

// Period is how long a schedule waits between two runs: D for "@every
// D", else the gap between its next two firings after now (a cron spec's
// gaps may differ; the next one stands for them). Zero for a spec that
// does not parse or never fires twice.
func Period(spec string, now time.Time) time.Duration {
	sched, err := cronParser.Parse(spec)
	if err != nil {
		return 0
	}
	if every, ok := sched.(cron.ConstantDelaySchedule); ok {
		return every.Delay
	}
	next := sched.Next(now)
	if next.IsZero() {
		return 0
	}
	after := sched.Next(next)
	if after.IsZero() {
		return 0
	}
	return after.Sub(next)
}
