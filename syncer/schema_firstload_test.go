package syncer_test

import (
	"testing"

	"github.com/syncd/syncd/syncer"
)

// A column added to the source while a first load is unfinished (chunks
// done, no watermark yet) ends filled in every row of the copy: the rows
// of the chunks already loaded are backfilled before the load resumes,
// and the chunks left are loaded with the column.
func TestColumnAddedDuringFirstLoadIsFilled(t *testing.T) {
	e := newEnv(t)
	itemsTable(t, e.src, 3000)
	c := e.config(t, "public.items", 1000, "")
	crashAtChunk(t, e, c, 7)
	if st := e.state(t); st.FirstLoad == nil || st.Cursor != nil {
		t.Fatalf("after the crash: first load %v, cursor %q; want an unfinished load", st.FirstLoad, st.Cursor)
	}
	e.src.Exec(t, `ALTER TABLE items ADD COLUMN tier text NOT NULL DEFAULT 'gold'`)
	e.src.Exec(t, `UPDATE items SET tier = 'silver' WHERE id % 7 = 0`)
	e.run(t, c, syncer.Options{FirstLoad: loadOpts()})
	e.assertSame(t, "items", itemCols+", tier")
	st := e.state(t)
	if st.FirstLoad != nil || st.Cursor == nil || st.Backfill != nil {
		t.Fatalf("after the run: first load %v, cursor %q, backfill %+v; want a finished load and no backfill left", st.FirstLoad, st.Cursor, st.Backfill)
	}
	var nulls int
	if err := e.dst.Pool.QueryRow(t.Context(), `SELECT count(*) FROM copy WHERE tier IS NULL`).Scan(&nulls); err != nil || nulls != 0 {
		t.Fatalf("%d rows of the copy have NULL tier (%v), want 0", nulls, err)
	}
}
