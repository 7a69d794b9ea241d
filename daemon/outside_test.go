package daemon_test

import (
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// Rows the cursor cannot reach (a NULL cursor column, a stamp far past the
// source's clock) are copied by the daemon's runs and counted in its
// metrics until the source is fixed.
func TestRowsOutsideCursorInMetrics(t *testing.T) {
	f := newFixture(t)
	f.db.Exec(t, `CREATE TABLE src (id bigint PRIMARY KEY, updated_at timestamptz DEFAULT clock_timestamp(), v text)`)
	f.db.Exec(t, `CREATE INDEX ON src (updated_at, id)`)
	f.insert(t, "src", 1, 50)
	f.db.Exec(t, `UPDATE src SET updated_at = NULL WHERE id IN (3, 30)`)
	f.db.Exec(t, `UPDATE src SET updated_at = 'infinity' WHERE id = 40`)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "lookback: 0s\n^schedule: \"@every 1s\"")
	d := startDaemon(t, path, nil)
	testutil.Eventually(t, 20*time.Second, "the counts in the metrics and the copy equal", func() bool {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_rows_null_cursor{source="orders"}`] == 2 && m[`syncd_rows_ahead_of_clock{source="orders"}`] == 1 &&
			f.diff(t, "src", "copy") == 0
	})
	f.db.Exec(t, `UPDATE src SET updated_at = now() WHERE updated_at IS NULL OR updated_at = 'infinity'`)
	testutil.Eventually(t, 20*time.Second, "the counts back to 0 and the copy equal", func() bool {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_rows_null_cursor{source="orders"}`] == 0 && m[`syncd_rows_ahead_of_clock{source="orders"}`] == 0 &&
			f.diff(t, "src", "copy") == 0
	})
}
