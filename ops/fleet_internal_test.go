package ops

import (
	"testing"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
)

// A record is stale when neither a run's end nor a page moved it for
// three of its writer's recording intervals; a record without a run (a
// catalog of format 1, a run never ended) is judged by its last page, at
// the interval this syncd would use for the source's schedule.
func TestFleetRecordStale(t *testing.T) {
	read := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return read.Add(-d) }
	hourly, everySecond := &config.Config{Schedule: "@every 1h"}, &config.Config{Schedule: "@every 1s"}
	for _, tc := range []struct {
		name       string
		rec        catalog.Record
		c          *config.Config
		every      float64
		stale      bool
		lag, since *float64
	}{
		{"a run 5s ago, every 2s", catalog.Record{UpdatedAt: ago(time.Hour), Run: catalog.Run{At: ago(5 * time.Second), CaughtUp: true, Fresh: ago(6 * time.Second), Every: 2 * time.Second}}, everySecond, 2, false, ptr(6), ptr(5)},
		{"a run 7s ago, every 2s", catalog.Record{UpdatedAt: ago(time.Hour), Run: catalog.Run{At: ago(7 * time.Second), Every: 2 * time.Second}}, everySecond, 2, true, nil, ptr(7)},
		{"a page since the run", catalog.Record{UpdatedAt: ago(time.Second), Run: catalog.Run{At: ago(time.Minute), Every: 2 * time.Second}}, everySecond, 2, false, nil, ptr(60)},
		{"no run, a page 80s ago, @every 1s", catalog.Record{UpdatedAt: ago(80 * time.Second)}, everySecond, 30, false, nil, nil},
		{"no run, a page 91s ago, @every 1s", catalog.Record{UpdatedAt: ago(91 * time.Second)}, everySecond, 30, true, nil, nil},
		{"no run, a page 2h ago, hourly", catalog.Record{UpdatedAt: ago(2 * time.Hour)}, hourly, 3600, false, nil, nil},
	} {
		tc.rec.ReadAt = read
		f := withStale(fleetSource(tc.rec), tc.c)
		if f.RecordEverySeconds != tc.every || f.StaleAfterSeconds != 3*tc.every || f.Stale != tc.stale || !same(f.LagSeconds, tc.lag) || !same(f.SinceRunSeconds, tc.since) {
			t.Errorf("%s: every %v, stale after %v, stale %v, lag %v, since run %v; want every %v, stale %v, lag %v, since run %v",
				tc.name, f.RecordEverySeconds, f.StaleAfterSeconds, f.Stale, val(f.LagSeconds), val(f.SinceRunSeconds), tc.every, tc.stale, val(tc.lag), val(tc.since))
		}
		if (f.RunAt == "") != tc.rec.Run.At.IsZero() || (f.RunCaughtUp == nil) != tc.rec.Run.At.IsZero() {
			t.Errorf("%s: run at %q, caught up %v", tc.name, f.RunAt, f.RunCaughtUp)
		}
	}
}

func ptr(f float64) *float64 { return &f }

func same(a, b *float64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func val(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}
