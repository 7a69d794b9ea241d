package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/syncd/syncd/internal/testutil"
)

// A transaction left open on the source holds the read bound back; the
// daemon's metrics name its pid and how far the bound is held back, so a
// stuck writer is seen, and the holder clears once it ends.
func TestBoundHolderInMetrics(t *testing.T) {
	f := newFixture(t)
	f.table(t, "src", 20)
	path := f.source(t, "orders.yaml", "orders", "src", "copy", "lookback: 0s\n^schedule: \"@every 1s\"")
	ctx := context.Background()
	conn, err := f.db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid float64
	if err := tx.QueryRow(ctx, "UPDATE src SET v = 'open', updated_at = now() WHERE id = 1 RETURNING pg_backend_pid()::float8").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, path, nil)
	testutil.Eventually(t, 20*time.Second, "the holder's pid in syncd_read_bound_holder_pid", func() bool {
		m := testutil.Scrape(t, d.addr).Series
		return m[`syncd_read_bound_holder_pid{source="orders"}`] == pid && m[`syncd_read_bound_held_back_seconds{source="orders"}`] >= 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "the holder cleared and the copy equal", func() bool {
		return testutil.Scrape(t, d.addr).Series[`syncd_read_bound_holder_pid{source="orders"}`] == 0 && f.diff(t, "src", "copy") == 0
	})
}
