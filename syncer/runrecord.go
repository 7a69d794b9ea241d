package syncer

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/syncd/syncd/catalog"
	"github.com/syncd/syncd/config"
	"github.com/syncd/syncd/page"
	"github.com/syncd/syncd/sink"
)

// The sink's record of each copy says how its last run ended (when, the
// bound it reached, whether it caught up, how fresh the copy is), so that
// every replica of a fleet can show a copy another replica runs. An idle
// run writes nothing else to the sink, and a daemon may run a source every
// second: the run's end is recorded with the last page of a run that has
// one (no statement of its own), and otherwise at most once per
// RecordEvery, or at once when it says something new (the first run of a
// process that took the copy over, a run that caught up after one that
// did not, or the other way round).

// DefaultRecordEvery is how often, at most, an idle run of a copy is
// recorded in its sink's record when the schedule's period is shorter.
const DefaultRecordEvery = 30 * time.Second

// EnvRecordEvery names the variable that sets DefaultRecordEvery's value
// (a Go duration such as 30s) when Options.RecordEvery is not set.
const EnvRecordEvery = "SYNCD_RECORD_EVERY"

// RecordEvery is how often, at most, an idle run of c is recorded: every
// when set, else $SYNCD_RECORD_EVERY, else DefaultRecordEvery, and never
// more often than c's schedule runs it. The fleet status uses it too, for
// a record that has no run yet.
func RecordEvery(every time.Duration, c *config.Config) time.Duration {
	if every <= 0 {
		if d, err := time.ParseDuration(os.Getenv(EnvRecordEvery)); err == nil && d > 0 {
			every = d
		}
	}
	if every <= 0 {
		every = DefaultRecordEvery
	}
	return max(every, config.Period(c.Schedule, time.Now()))
}

// runEnd is how the run ends once the page in hand, the last, is applied
// (page.Page.End): nil when the run does not catch up.
func (r *runner) runEnd() *page.RunEnd {
	if r.rec == nil || r.table == nil || r.table.caughtUp.IsZero() {
		return nil
	}
	return &page.RunEnd{Bound: r.res.Bound, Fresh: r.table.caughtUp, Every: RecordEvery(r.o.RecordEvery, r.c)}
}

// recordRun records how the run ended in the copy's record, unless its
// last page did, or it failed (its session may be in any state), or the
// record is recent and says the same (recordDue). A record that cannot be
// written is logged; the run stands.
func (r *runner) recordRun(ctx context.Context, err error) {
	conn := sink.LockConn(r.dst)
	if r.rec == nil || r.ended || conn == nil || ctx.Err() != nil || (err != nil && !errors.Is(err, ErrStopped)) {
		return
	}
	run := catalog.Run{Bound: r.res.Bound, CaughtUp: err == nil && !r.res.CaughtUp.IsZero(), Fresh: r.res.CaughtUp, Every: RecordEvery(r.o.RecordEvery, r.c)}
	if !r.recordDue(run) {
		return
	}
	if err := catalog.RecordRun(ctx, conn, r.rec.Copy, run); err != nil {
		r.log.Warn("the run's end could not be recorded in the sink's record of the copy; other replicas' status shows the run before it", "err", err)
		return
	}
	r.ended = true
}

// recordDue reports whether run is to be recorded: the record has no run
// yet, this process took the copy over, the run's catching up or its
// interval differs from the recorded run's, or the recorded run is at
// least run.Every old by the sink's clock.
func (r *runner) recordDue(run catalog.Run) bool {
	prev := r.rec.Run
	age := r.rec.ReadAt.Sub(prev.At) + time.Since(r.claimedAt)
	return prev.At.IsZero() || r.handover || prev.CaughtUp != run.CaughtUp ||
		prev.Every.Round(time.Millisecond) != run.Every.Round(time.Millisecond) || age >= run.Every
}
