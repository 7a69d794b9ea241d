package reconcile_test

import (
	"testing"

	"github.com/syncd/syncd/reconcile"
	"github.com/syncd/syncd/watermark"
)

// TestScopeWhereAndColumns compares only the selected rows and columns.
func TestScopeWhereAndColumns(t *testing.T) {
	f := newSimple(t, `CREATE TABLE t (id int PRIMARY KEY, updated_at timestamptz NOT NULL, val text, region text, secret text);
INSERT INTO t SELECT g, '2026-01-01'::timestamptz + g * interval '1 s', 'v' || g, CASE WHEN g % 4 = 0 THEN 'eu' ELSE 'us' END, 's' || g
FROM generate_series(1, 400) g`, `name: t
source:
  dsn: %[1]s
  table: t
  cursor: [updated_at, id]
  columns: [id, updated_at, val, region]
  where: region = 'us'
sink:
  dsn: %[2]s
  table: t
`)
	// A column that is not selected does not count; a row outside the
	// where clause does not count.
	f.src.Exec(t, "UPDATE t SET secret = 'changed' WHERE id = 5")
	f.src.Exec(t, "UPDATE t SET val = 'changed' WHERE id = 8") // region eu
	rep := f.reconcile(t, reconcile.Options{})
	assertCounts(t, rep, 0, 0, 0)
	if rep.RowsCompared != 300 {
		t.Errorf("compared %d rows, want the 300 us rows", rep.RowsCompared)
	}
	// A row that left the where clause stays in the copy: extra, once the
	// watermark has passed its cursor (before that it is not synced yet).
	f.src.Exec(t, "UPDATE t SET region = 'eu', updated_at = '2026-02-01' WHERE id = 9")
	f.sync(t)
	rep = f.reconcile(t, reconcile.Options{})
	assertCounts(t, rep, 0, 0, 0)
	if rep.SkippedUnsynced != 1 || rep.NotCovered[reconcile.ReasonPending] != 1 || rep.Clean() {
		t.Errorf("skipped %d rows as unsynced, %v not covered; want row 9 in both, and not clean", rep.SkippedUnsynced, rep.NotCovered)
	}
	f.src.Exec(t, "INSERT INTO t VALUES (401, '2026-03-01', 'v', 'us', 's')")
	f.sync(t)
	rep = f.reconcile(t, reconcile.Options{})
	assertKeys(t, "extra", rep.Keys.Extra, "9")
	assertCounts(t, rep, 0, 1, 0)
}

// TestBoundaryAfterResync: after `resync --from T` the rows before T count
// as synced; the others wait for the next run.
func TestBoundaryAfterResync(t *testing.T) {
	f := newFixture(t, 1000, "")
	if err := f.store.Update("items", func(st *watermark.State) error {
		st.Cursor, st.From = nil, "2026-01-01T00:10:00Z" // rows 1..599
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.dst.Exec(t, `UPDATE public.items_copy SET t = 'x' WHERE id IN (598, 601)`)
	rep := f.reconcile(t, reconcile.Options{})
	assertKeys(t, "changed", rep.Keys.Changed, "598")
	assertCounts(t, rep, 0, 0, 1)
	if rep.RowsCompared != 599 || rep.SkippedUnsynced != 1 || rep.NotCovered[reconcile.ReasonPending] != 401 {
		t.Errorf("compared %d rows, skipped %d, not covered %v; want 599, row 601, and rows 600 to 1000 pending", rep.RowsCompared, rep.SkippedUnsynced, rep.NotCovered)
	}
	// No watermark at all: nothing is compared, and the report says so.
	if err := f.store.Update("items", func(st *watermark.State) error {
		st.Cursor, st.From = nil, ""
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	rep = f.reconcile(t, reconcile.Options{})
	if !rep.NoWatermark || rep.RowsCompared != 0 || !rep.Equal() || rep.NotCovered[reconcile.ReasonNoWatermark] != 1000 || rep.Clean() {
		t.Errorf("without a watermark: %+v", rep)
	}
}
