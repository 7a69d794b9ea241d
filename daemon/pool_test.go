package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/syncd/syncd/daemon"
	"github.com/syncd/syncd/internal/pgutil"
	"github.com/syncd/syncd/internal/testutil"
)

// maxIdleRoundTrips bounds what one idle run of an unchanged table costs
// in the daemon, source and sink together. On the source four: one batch
// with the catalog fingerprint of the table, the read bound's statements
// (open transactions, write locks, rows stamped ahead of the clock) and the
// table's identity for the sink's catalog; the page that finds nothing new
// (its statement prepared in the same round trip); the rows outside the
// cursor (with the clock limit in the same statement); the reset of the
// session. On the sink three: the run lock (both keys in one statement),
// one batch with the copy's fingerprint, the catalog's claim, the
// lost-copy check and the durability settings, and the reset of the
// session, which releases the lock. Fresh sessions and a catalog read
// every run took 84; the sink's side took 14 before it was batched and the
// source's 11 (25 in all).
const maxIdleRoundTrips = 7

// awaitRuns waits until each source has n successful runs.
func awaitRuns(t *testing.T, d *inproc, n int, names ...string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("run %d of %s", n, strings.Join(names, ", ")), func() bool {
		m := testutil.Scrape(t, d.addr).Series
		for _, name := range names {
			if m[`syncd_runs_total{outcome="ok",source="`+name+`"}`] < float64(n) {
				return false
			}
		}
		return true
	})
}

// An idle run of an unchanged table opens no session (the daemon's pool
// lends it one another run of this or another source gave back) and
// re-reads no catalog: it costs at most maxIdleRoundTrips round trips,
// counted on the wire.
func TestIdleRunReusesSessionsAndSkipsCatalogWork(t *testing.T) {
	f := newFixture(t)
	f.table(t, "a_src", 20)
	f.table(t, "b_src", 20)
	a := f.source(t, "a.yaml", "a", "a_src", "a_copy", "lookback: 0s\n^schedule: \"@every 1h\"")
	f.source(t, "b.yaml", "b", "b_src", "b_copy", "lookback: 0s\n^schedule: \"@every 1h\"")
	var ctr pgutil.Counter
	clock := newFakeClock()
	d := startDaemonCtx(t, pgutil.WithCounter(context.Background(), &ctr), strings.TrimSuffix(a, "a.yaml"), func(o *daemon.Options) {
		o.Clock = clock
		o.MaxConcurrentRuns = 1 // one run at a time: the sources share one session of each side
	})
	awaitRuns(t, d, 1, "a", "b") // the first loads
	// One more run of each fills the catalog cache (the copies did not
	// exist when the first run began). The ticks of the two sources are
	// spread over the hour: two hours make each tick at least once.
	clock.advance(t, 2*time.Hour)
	awaitRuns(t, d, 2, "a", "b")
	runs := func() float64 {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_runs_total{outcome="ok",source="a"}`] + m[`syncd_runs_total{outcome="ok",source="b"}`]
	}
	ran := runs()
	before := ctr.Snapshot()
	clock.advance(t, 2*time.Hour)
	awaitRuns(t, d, 3, "a", "b")
	got := ctr.Snapshot().Since(before)
	n := int(runs() - ran)
	if got.Connects != 0 {
		t.Errorf("%d idle runs opened %d sessions; want 0 (the pool's)", n, got.Connects)
	}
	if got.RoundTrips > n*maxIdleRoundTrips {
		t.Errorf("%d idle runs took %d round trips, want at most %d each; statements:\n%s", n, got.RoundTrips, maxIdleRoundTrips, strings.Join(got.Statements, "\n"))
	}
	t.Logf("%d idle runs: %d round trips, %d sessions opened", n, got.RoundTrips, got.Connects)
	f.requireEqual(t, "a_src", "a_copy")
	f.requireEqual(t, "b_src", "b_copy")
	// Sessions are the budget's: one on each side, idle between runs, and
	// neither holds a run lock.
	var sessions, locks int
	if err := queryURL(f.db.URL, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'syncd'),
  (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, &sessions, &locks); err != nil {
		t.Fatal(err)
	}
	if sessions > 2 || locks != 0 {
		t.Errorf("between runs the daemon keeps %d sessions and %d advisory locks; want at most 2 and none", sessions, locks)
	}
}

// DDL between two ticks of a source whose sessions and catalog reads are
// reused is seen at the next tick: the copy follows a column added and
// one widened, row by row.
func TestSchemaChangeBetweenTicksOfReusedSession(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 50)
	f.db.Exec(t, `ALTER TABLE src ADD COLUMN n int`)
	f.db.Exec(t, `UPDATE src SET n = id`)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "lookback: 0s\n^schedule: \"@every 1h\"")
	var ctr pgutil.Counter
	clock := newFakeClock()
	d := startDaemonCtx(t, pgutil.WithCounter(context.Background(), &ctr), path, func(o *daemon.Options) { o.Clock = clock })
	awaitRuns(t, d, 1, "orders")
	clock.advance(t, time.Hour)
	awaitRuns(t, d, 2, "orders")
	// An idle tick on a reused session, from the cache.
	before := ctr.Snapshot()
	clock.advance(t, time.Hour)
	awaitRuns(t, d, 3, "orders")
	if got := ctr.Snapshot().Since(before); got.Connects != 0 || got.RoundTrips > maxIdleRoundTrips {
		t.Fatalf("the idle tick opened %d sessions and took %d round trips; want 0 and at most %d", got.Connects, got.RoundTrips, maxIdleRoundTrips)
	}

	f.db.Exec(t, `ALTER TABLE src ADD COLUMN w text DEFAULT 'w'`)
	f.db.Exec(t, `ALTER TABLE src ALTER COLUMN n TYPE bigint`)
	f.db.Exec(t, `UPDATE src SET n = 5000000000 + id, w = 'w' || id, updated_at = clock_timestamp() WHERE id % 5 = 0`)
	f.insert(t, "src", 51, 60)
	clock.advance(t, time.Hour)
	awaitRuns(t, d, 4, "orders")
	cmp := testutil.Compare{Key: []string{"id"}, Columns: []string{"id", "updated_at", "v", "n", "w"}}
	cmp.RequireEqual(t, f.db.Pool, "src", f.db.Pool, "copy")

	// A truncated table (a new relfilenode) with other rows: the run sees
	// the rewrite, repairs the copy and copies the new rows.
	f.db.Exec(t, `TRUNCATE src`)
	f.insert(t, "src", 100, 120)
	f.db.Exec(t, `UPDATE src SET n = id, w = 'x'`)
	clock.advance(t, time.Hour)
	awaitRuns(t, d, 5, "orders")
	cmp.RequireEqual(t, f.db.Pool, "src", f.db.Pool, "copy")

	// A column dropped and one renamed: the rename is seen at once and
	// refused as always (the copy cannot follow it by itself); once the
	// copy's column is renamed as the error says, the next tick goes on.
	f.db.Exec(t, `ALTER TABLE src DROP COLUMN w`)
	f.db.Exec(t, `ALTER TABLE src RENAME COLUMN n TO n2`)
	f.db.Exec(t, `UPDATE src SET n2 = -id, updated_at = clock_timestamp() WHERE id % 2 = 0`)
	clock.advance(t, time.Hour)
	testutil.Eventually(t, 30*time.Second, "the run that finds the rename", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_runs_total{outcome="failed",source="orders"}`] == 1
	})
	if !d.logs.Contains(`column \"n\" was renamed to \"n2\"`) {
		t.Fatalf("the failed run did not name the rename:\n%s", d.logs.String())
	}
	f.db.Exec(t, `ALTER TABLE copy RENAME COLUMN n TO n2`)
	clock.advance(t, time.Hour)
	awaitRuns(t, d, 6, "orders")
	cmp = testutil.Compare{Key: []string{"id"}, Columns: []string{"id", "updated_at", "v", "n2"}}
	cmp.RequireEqual(t, f.db.Pool, "src", f.db.Pool, "copy")
}
