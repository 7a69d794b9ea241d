package syncer_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/syncer"
)

// lateCommit plays the hole the bound closes: a transaction stamps rows
// with now() (its start), other transactions stamp and commit later rows,
// syncd runs with lookback 0s, then the first transaction commits and
// syncd runs again.
func lateCommit(t *testing.T, bound string) (*fixture, syncer.Result) {
	return lateCommitOn(t, newFixture(t), bound)
}

func lateCommitOn(t *testing.T, f *fixture, bound string) (*fixture, syncer.Result) {
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, now() - interval '1 minute' + g * interval '1 ms', 'v' || g FROM generate_series(1, 20) g`)
	c := f.config(t, f.db.URL, "lookback: 0s", "bound: "+bound)
	f.run(t, c)
	f.assertSame(t)

	late := begin(t, f.db.URL)
	late.exec(t, `UPDATE src SET v = 'late', updated_at = DEFAULT WHERE id = 1`)
	late.exec(t, `INSERT INTO src (id, v) VALUES (100, 'late insert')`)
	f.clockPast(t, late.since) // the rows committed next are stamped after its start
	f.db.Exec(t, `UPDATE src SET v = 'early', updated_at = DEFAULT WHERE id IN (2, 3)`)
	held := f.run(t, c)
	late.exec(t, "COMMIT")
	f.run(t, c)
	return f, held
}

func TestLateCommitArrivesWithBound(t *testing.T) {
	f, held := lateCommit(t, "transactions")
	// The run while the transaction was open stopped below its start.
	if held.Holder.PID == 0 || held.Rows != 0 {
		t.Errorf("run during the open transaction: holder pid %d, %d rows read; want a holder and 0 rows (rows 2 and 3 are stamped after its start)", held.Holder.PID, held.Rows)
	}
	f.assertSame(t)
}

// A timestamp(0) without time zone holding UTC: the late row's stamp is
// rounded to the second, possibly below the transaction's start; the bound
// is truncated to the second so it still waits for that row.
func TestLateCommitArrivesWithBoundOnUTCTimestampSeconds(t *testing.T) {
	f := newFixtureOf(t, "timestamp(0) without time zone NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')")
	f, held := lateCommitOn(t, f, "transactions")
	if held.Holder.PID == 0 {
		t.Errorf("run during the open transaction: no holder reported")
	}
	// The clock part of the bound is truncated to the second as well, and
	// now() is rounded, up to half a second into the future: rows of the
	// current second wait until the clock, truncated, has passed them.
	testutil.Eventually(t, 10*time.Second, "the source's clock, truncated to the second, to pass the newest row", func() bool {
		var past bool
		if err := f.db.Pool.QueryRow(context.Background(),
			`SELECT date_trunc('second', clock_timestamp() AT TIME ZONE 'UTC') > (SELECT max(updated_at) FROM src)`).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	})
	f.run(t, f.config(t, f.db.URL, "lookback: 0s"))
	f.assertSame(t)
}

func TestLateCommitMissedWithoutBound(t *testing.T) {
	f, held := lateCommit(t, "off")
	if held.Holder.PID != 0 || !held.Bound.IsZero() || held.Rows != 2 {
		t.Errorf("bound off: holder pid %d, bound %v, %d rows; want no bound and rows 2 and 3 read", held.Holder.PID, held.Bound, held.Rows)
	}
	// The watermark passed the late transaction's start before it
	// committed: its update and its insert never reach the copy.
	if d := f.diff(t); !slices.Equal(d, []int{1, 100}) {
		t.Fatalf("bound off: ids that differ = %v, want exactly [1 100] (the late commit is lost)", d)
	}
	if got := f.rows(t, "dst")[1]; !strings.HasSuffix(got, "|v1") {
		t.Errorf("bound off: copy of row 1 = %q, want the value before the late update", got)
	}
}

// appClockBehind writes rows stamped by an application whose clock is 2 s
// behind the database, after syncd has read rows stamped by the database.
func appClockBehind(t *testing.T, lookback string) *fixture {
	f := newFixture(t)
	c := f.config(t, f.db.URL, "lookback: "+lookback)
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT g, clock_timestamp(), 'db clock' FROM generate_series(1, 5) g`)
	f.run(t, c)
	// Stamped 2 s behind the database's clock, and never later than just
	// behind the watermark: on a slow machine the 2 s alone may already
	// have passed since rows 1-5, and the row would simply be new.
	f.db.Exec(t, `INSERT INTO src (id, updated_at, v) SELECT 6, least(clock_timestamp() - interval '2 seconds', max(updated_at) - interval '1 millisecond'), 'app clock' FROM src`)
	f.run(t, c)
	return f
}

// The lookback is far wider than the 2 s the clock is behind: the row is
// stamped just below the watermark when the machine is slow (see
// appClockBehind), and the previous run's bound minus the lookback, where
// the next run re-reads from, must stay below it however long the machine
// took between the rows' insert and that run's bound.
func TestAppClockBehindArrivesWithLookback(t *testing.T) {
	f := appClockBehind(t, "2m")
	f.assertSame(t)
}

// What lookback: 0s misses, reconcile reports: exactly the row stamped
// behind, as missing from the copy.
func TestAppClockBehindReportedByReconcile(t *testing.T) {
	f := appClockBehind(t, "0s")
	c := f.config(t, f.db.URL, "lookback: 0s")
	rep, err := reconcile.Run(context.Background(), c, f.store, reconcile.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Missing != 1 || rep.Changed != 0 || rep.Extra != 0 || !slices.Equal(rep.Keys.Missing, []string{"6"}) {
		t.Fatalf("reconcile: missing %d %v, changed %d, extra %d; want exactly id 6 missing", rep.Missing, rep.Keys.Missing, rep.Changed, rep.Extra)
	}
}

func TestAppClockBehindMissedWithoutLookback(t *testing.T) {
	f := appClockBehind(t, "0s")
	// The bound cannot see an application's clock: only lookback (or
	// reconcile) finds such a row.
	if d := f.diff(t); !slices.Equal(d, []int{6}) {
		t.Fatalf("lookback 0s: ids that differ = %v, want exactly [6] (the row stamped 2 s in the past)", d)
	}
}
